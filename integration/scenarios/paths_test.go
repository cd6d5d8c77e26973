package scenarios

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/lib/pq"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/integration/internal/pqconn"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// TestMain stops the servers dbservertest may start. dbservertest.Main ends the
// process itself, so nothing can run after m.Run here: the goroutine leak
// check is done per test instead (see forEachPath), which also pins a leak
// to the scenario that caused it.
func TestMain(m *testing.M) { dbservertest.Main(m) }

// Settings shared by every path.
const (
	// maxConns bounds each path's pool, so that parallel subtests stay well
	// within the servers' connection limits.
	maxConns = 12
	// pgDeadlockTimeout is the deadlock_timeout of every PostgreSQL session
	// (default 1 s), so that deadlock scenarios finish quickly.
	pgDeadlockTimeout = "100ms"
	// mysqlLockWaitTimeout (seconds) bounds a lock wait on MySQL (default
	// 50 s), so that a scenario that goes wrong fails instead of hanging.
	mysqlLockWaitTimeout = "10"
	// scenarioTimeout bounds each scenario on each path.
	scenarioTimeout = 30 * time.Second
	// idleWait is how long a path waits at its end for its pool to have no
	// connection in use (a destroyed pgxpool connection is released
	// asynchronously).
	idleWait = 3 * time.Second
)

// row is one result row: *sql.Row and pgx.Row.
type row interface {
	Scan(dest ...any) error
}

// querier runs a scenario's statements, in an attempt's transaction or
// directly on the pool, whatever the driver. Queries are written with
// PostgreSQL's placeholders $1, $2, ..., each used once and in order; the
// MySQL path rewrites them to ?.
type querier interface {
	exec(ctx context.Context, query string, args ...any) error
	queryRow(ctx context.Context, query string, args ...any) row
	// forEach calls scan for each row of the query's result.
	forEach(ctx context.Context, query string, args []any, scan func(r row) error) error
	// handle is what the driver handed over: the *sql.Tx or pgx.Tx given
	// to fn, or the pool.
	handle() any
}

// sqlHandle is what *sql.DB and *sql.Tx have in common.
type sqlHandle interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// sqlQuerier is a querier over database/sql.
type sqlQuerier struct {
	h      sqlHandle
	rebind func(string) string
}

func (q sqlQuerier) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.h.ExecContext(ctx, q.rebind(query), args...)
	return err
}

func (q sqlQuerier) queryRow(ctx context.Context, query string, args ...any) row {
	return q.h.QueryRowContext(ctx, q.rebind(query), args...)
}

func (q sqlQuerier) forEach(ctx context.Context, query string, args []any, scan func(r row) error) (err error) {
	rows, err := q.h.QueryContext(ctx, q.rebind(query), args...)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rows.Close()) }()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (q sqlQuerier) handle() any { return q.h }

// pgxHandle is what *pgxpool.Pool and pgx.Tx have in common.
type pgxHandle interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// pgxQuerier is a querier over pgx.
type pgxQuerier struct {
	h pgxHandle
}

func (q pgxQuerier) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.h.Exec(ctx, query, args...)
	return err
}

func (q pgxQuerier) queryRow(ctx context.Context, query string, args ...any) row {
	return q.h.QueryRow(ctx, query, args...)
}

func (q pgxQuerier) forEach(ctx context.Context, query string, args []any, scan func(r row) error) error {
	rows, err := q.h.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (q pgxQuerier) handle() any { return q.h }

// dialect holds what differs between the engines: error codes, the
// statements that only one engine understands, and how to end a session.
type dialect struct {
	// rebind rewrites $1, $2, ... into the driver's placeholders.
	rebind func(query string) string
	// codeOf returns the code of the server error in err's tree, found as
	// the driver's own error type (*pgconn.PgError or *mysql.MySQLError):
	// the SQLSTATE on PostgreSQL, the error number on MySQL; "" if none.
	codeOf func(err error) string
	// Codes of the errors the scenarios provoke. On MySQL, a conflict
	// under SERIALIZABLE shows up as a deadlock of its locking reads.
	serialization, deadlock, unique, readOnly string
	// raiseRetryable makes the server report a retryable error without
	// any conflict; raisedCode is its code.
	raiseRetryable, raisedCode string
	// backendID returns the session's id, for kill.
	backendID string
	// txIsolation returns the isolation level of the current transaction,
	// once the transaction has touched a table. MySQL and MariaDB report
	// the session's level, not the transaction's, in @@transaction_isolation
	// (@@tx_isolation on MariaDB before 11.1), so the MySQL dialect reads
	// InnoDB's view of the transaction instead.
	txIsolation string
	// txIsolationDelay is how long to wait before reading txIsolation:
	// InnoDB refreshes its INFORMATION_SCHEMA transaction tables only when
	// they have not been read for 100 ms, so an earlier read can hide the
	// current transaction.
	txIsolationDelay time.Duration
	// defaultIsolation is the server's default level, normalized.
	defaultIsolation string
	// kill ends session id from a connection of its own to admin and
	// returns once the session is gone.
	kill func(ctx context.Context, admin string, id int64) error
}

var pgDialect = &dialect{
	rebind: func(q string) string { return q },
	codeOf: func(err error) string {
		if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
			return pe.Code
		}
		return ""
	},
	serialization:    "40001",
	deadlock:         "40P01",
	unique:           "23505",
	readOnly:         "25006",
	raiseRetryable:   `DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '40001'; END $$`,
	raisedCode:       "40001",
	backendID:        "SELECT pg_backend_pid()",
	txIsolation:      "SHOW transaction_isolation",
	defaultIsolation: "read committed",
	kill: func(ctx context.Context, admin string, id int64) error {
		return withDB(ctx, "pgx", admin, func(db *sql.DB) error {
			// Terminate, then wait for the session to be gone, so the
			// victim's next statement fails for sure. (PostgreSQL 14's
			// pg_terminate_backend(pid, timeout) would wait itself; this
			// also works on 13.)
			var ended bool
			if err := db.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", id).Scan(&ended); err != nil {
				return err
			}
			if !ended {
				return fmt.Errorf("backend %d could not be signalled", id)
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				var alive bool
				if err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", id).Scan(&alive); err != nil {
					return err
				}
				if !alive {
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("backend %d did not end", id)
				}
			}
		})
	},
}

// pqDialect is PostgreSQL's through lib/pq, whose server errors are
// *pq.Error.
var pqDialect = func() *dialect {
	d := *pgDialect
	d.codeOf = func(err error) string {
		if pe, ok := errors.AsType[*pq.Error](err); ok {
			return string(pe.Code)
		}
		return ""
	}
	return &d
}()

var mysqlDialect = &dialect{
	rebind: func(q string) string { return placeholder.ReplaceAllLiteralString(q, "?") },
	codeOf: func(err error) string {
		if me, ok := errors.AsType[*mysql.MySQLError](err); ok {
			return strconv.Itoa(int(me.Number))
		}
		return ""
	},
	serialization:    "1213",
	deadlock:         "1213",
	unique:           "1062",
	readOnly:         "1792",
	raiseRetryable:   "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213",
	raisedCode:       "1213",
	backendID:        "SELECT CONNECTION_ID()",
	txIsolation:      "SELECT trx_isolation_level FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = CONNECTION_ID()",
	txIsolationDelay: 150 * time.Millisecond,
	defaultIsolation: "repeatable read",
	kill: func(ctx context.Context, admin string, id int64) error {
		return withDB(ctx, "mysql", admin, func(db *sql.DB) error {
			// KILL takes no placeholder; id is a number the server gave.
			_, err := db.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
			return err
		})
	},
}

// placeholder matches PostgreSQL's numbered placeholders.
var placeholder = regexp.MustCompile(`\$[0-9]+`)

// normIsolation normalizes an isolation level's name as servers spell it
// ("REPEATABLE-READ", "repeatable read") to lower case with spaces.
func normIsolation(s string) string {
	return strings.ReplaceAll(strings.ToLower(s), "-", " ")
}

// withDB runs f with a database handle of its own on dsn.
func withDB(ctx context.Context, driver, dsn string, f func(db *sql.DB) error) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	return errors.Join(f(db), db.Close())
}

// txFunc is a scenario's transaction body, for any path.
type txFunc func(ctx context.Context, q querier) error

// driverPath is one way of running transactions with txretry, on a fresh
// database of its own.
type driverPath struct {
	name string
	d    *dialect
	// db runs statements outside RunInTx, each in its own transaction.
	db querier
	// run is RunInTx of the path, on db's pool.
	run func(ctx context.Context, fn txFunc, opts ...txretry.Option) error
	// inUse is the number of connections of the pool in use.
	inUse func() int
	// admin is the server-level DSN, for kill.
	admin string
	// sharesHandle reports that fn gets the driver's own transaction (the
	// *sql.Tx), which a nested call hands its fn too; pgxretry's pgx.Tx is
	// a wrapper that refuses Commit and Rollback.
	sharesHandle bool
}

// pathKind describes a driver path before it is opened.
type pathKind struct {
	name string
	// server resolves the path's server (skipping or failing t if it is
	// unavailable) and returns its admin DSN.
	server func(t testing.TB) string
	// open creates the path on a fresh database; everything is closed at
	// t's cleanup.
	open func(t *testing.T) *driverPath
}

var (
	pgxNative = pathKind{name: "pgx-native", server: dbservertest.PostgresAdmin, open: openPgxNative}
	pgxStdlib = pathKind{name: "pgx-stdlib", server: dbservertest.PostgresAdmin, open: openPgxStdlib}
	pqPath    = pathKind{name: "pq", server: dbservertest.PostgresAdmin, open: openPQ}
	mysqlPath = pathKind{name: "mysql", server: dbservertest.MySQLAdmin, open: openMySQL}

	allPaths      = []pathKind{pgxNative, pgxStdlib, pqPath, mysqlPath}
	postgresPaths = []pathKind{pgxNative, pgxStdlib, pqPath}
)

func openPgxNative(t *testing.T) *driverPath { return pgxNativeOn(t, dbservertest.Postgres(t)) }

// pgxNativeOn opens a pgx-native path on dsn, a database of the test's.
func pgxNativeOn(t *testing.T, dsn string) *driverPath {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = pgDeadlockTimeout
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	p := &driverPath{
		name: "pgx-native",
		d:    pgDialect,
		db:   pgxQuerier{h: pool},
		run: func(ctx context.Context, fn txFunc, opts ...txretry.Option) error {
			return pgxretry.RunInTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
				return fn(ctx, pgxQuerier{h: tx})
			}, opts...)
		},
		inUse: func() int { return int(pool.Stat().AcquiredConns()) },
		admin: dbservertest.PostgresAdmin(t),
	}
	closeAtEnd(t, p, func() error { pool.Close(); return nil })
	return p
}

func openPgxStdlib(t *testing.T) *driverPath { return pgxStdlibOn(t, dbservertest.Postgres(t)) }

// pgxStdlibOn opens a pgx-stdlib path on dsn, a database of the test's.
func pgxStdlibOn(t *testing.T, dsn string) *driverPath {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	cfg.RuntimeParams["deadlock_timeout"] = pgDeadlockTimeout
	db := stdlib.OpenDB(*cfg)
	p := sqlPath("pgx-stdlib", pgDialect, db)
	p.admin = dbservertest.PostgresAdmin(t)
	closeAtEnd(t, p, db.Close)
	return p
}

func openPQ(t *testing.T) *driverPath { return pqOn(t, dbservertest.Postgres(t)) }

// pqOn opens a lib/pq path on dsn, a database of the test's.
func pqOn(t *testing.T, dsn string) *driverPath {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	cfg.RuntimeParams["deadlock_timeout"] = pgDeadlockTimeout
	db, err := pqconn.Open(cfg, 0)
	if err != nil {
		t.Fatalf("lib/pq: %v", err)
	}
	p := sqlPath("pq", pqDialect, db)
	p.admin = dbservertest.PostgresAdmin(t)
	closeAtEnd(t, p, db.Close)
	return p
}

func openMySQL(t *testing.T) *driverPath { return mysqlOn(t, dbservertest.MySQL(t)) }

// mysqlOn opens a mysql path on dsn, a database of the test's.
func mysqlOn(t *testing.T, dsn string) *driverPath {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["innodb_lock_wait_timeout"] = mysqlLockWaitTimeout
	if snapshotIsolationOn(t) {
		// MariaDB 11.6.2 and later default innodb_snapshot_isolation to
		// ON: a write conflict at REPEATABLE READ or SERIALIZABLE is then
		// 1020, retried only with mysqlerr.IsSnapshotConflict (opt-in).
		// The scenarios prove the default classifier on InnoDB's locking
		// conflicts, so their sessions turn it OFF, as older servers have it.
		cfg.Params["innodb_snapshot_isolation"] = "OFF"
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("connector: %v", err)
	}
	db := sql.OpenDB(connector)
	p := sqlPath("mysql", mysqlDialect, db)
	p.admin = dbservertest.MySQLAdmin(t)
	t.Logf("server: %s", dbservertest.MySQLFlavor(t))
	closeAtEnd(t, p, db.Close)
	return p
}

// snapshotIsolation caches, for the test binary's one MySQL-family server,
// whether innodb_snapshot_isolation is ON by default.
var snapshotIsolation struct {
	once sync.Once
	on   bool
	err  error
}

// snapshotIsolationOn reports whether the server's innodb_snapshot_isolation
// is ON by default (MariaDB 11.6.2 and later); servers without the variable
// (MySQL, older MariaDB) answer 1193 and report false.
func snapshotIsolationOn(t *testing.T) bool {
	t.Helper()
	dsn := dbservertest.MySQLAdmin(t)
	snapshotIsolation.once.Do(func() {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			snapshotIsolation.err = err
			return
		}
		defer db.Close()
		var on sql.NullBool
		err = db.QueryRow("SELECT @@GLOBAL.innodb_snapshot_isolation").Scan(&on)
		if me := (*mysql.MySQLError)(nil); errors.As(err, &me) && me.Number == 1193 {
			return // unknown system variable
		}
		snapshotIsolation.on, snapshotIsolation.err = on.Bool, err
	})
	if snapshotIsolation.err != nil {
		t.Fatalf("innodb_snapshot_isolation: %v", snapshotIsolation.err)
	}
	return snapshotIsolation.on
}

// sqlPath is a database/sql path over db.
func sqlPath(name string, d *dialect, db *sql.DB) *driverPath {
	db.SetMaxOpenConns(maxConns)
	return &driverPath{
		name: name,
		d:    d,
		db:   sqlQuerier{h: db, rebind: d.rebind},
		run: func(ctx context.Context, fn txFunc, opts ...txretry.Option) error {
			return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
				return fn(ctx, sqlQuerier{h: tx, rebind: d.rebind})
			}, opts...)
		},
		inUse:        func() int { return db.Stats().InUse },
		sharesHandle: true,
	}
}

// closeAtEnd checks at t's end that the pool has no connection in use, then
// closes it (before dbservertest drops the database). A pool that cannot close
// because a connection was never given back fails the test instead of
// hanging it.
func closeAtEnd(t *testing.T, p *driverPath, closeFn func() error) {
	t.Cleanup(func() {
		done := make(chan error, 1)
		go func() { done <- closeFn() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("close pool: %v", err)
			}
		case <-time.After(idleWait):
			t.Errorf("pool did not close within %v: a connection is still in use", idleWait)
		}
	})
	t.Cleanup(func() { requireIdle(t, p) })
}

// requireIdle fails t unless p's pool soon has no connection in use.
func requireIdle(t *testing.T, p *driverPath) {
	t.Helper()
	deadline := time.Now().Add(idleWait)
	for p.inUse() != 0 {
		if time.Now().After(deadline) {
			t.Errorf("%d connection(s) still in use", p.inUse())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// knownBackground are the long-lived goroutines that are not ours:
// testcontainers' connection to its reaper (Ryuk) and the Docker client's
// keep-alive connections, both alive as long as the containers dbservertest
// started. The drivers leave none behind once their pools are closed:
// database/sql's connection opener, pgxpool's health check and
// go-sql-driver's per-connection watcher all end with Close.
var knownBackground = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
}

// forEachPath runs body once per driver path, as parallel subtests, each on
// a fresh database. When all are done it checks that no goroutine leaked.
// Tests that call it must not be parallel themselves, so that the leak
// check sees only their own goroutines.
func forEachPath(t *testing.T, kinds []pathKind, body func(t *testing.T, p *driverPath)) {
	t.Helper()
	// Resolve the servers first (which may start containers and their
	// helper goroutines), in a subtest so that a missing server skips or
	// fails only that subtest and its paths, not the others.
	t.Run("servers", func(t *testing.T) {
		for _, k := range kinds {
			t.Run(k.name, func(t *testing.T) { k.server(t) })
		}
	})
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, knownBackground...)
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			body(t, k.open(t))
		})
	}
}

// testContext bounds a scenario and ends with the test.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), scenarioTimeout)
	t.Cleanup(cancel)
	return ctx
}

// setup runs statements outside any transaction of RunInTx.
func (p *driverPath) setup(t *testing.T, ctx context.Context, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if err := p.db.exec(ctx, s); err != nil {
			t.Fatalf("setup %q: %v", s, err)
		}
	}
}

// count returns the integer the query returns (a COUNT or a SUM).
func (p *driverPath) count(t *testing.T, ctx context.Context, query string, args ...any) int {
	t.Helper()
	var n int
	if err := p.db.queryRow(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("%q: %v", query, err)
	}
	return n
}

// itemsDDL creates the table most scenarios write to.
const itemsDDL = "CREATE TABLE items (id INT PRIMARY KEY)"

// gate lines up the first attempts of concurrent calls: await returns once
// every party has arrived. A party that leaves its attempt early (say, with
// an error) must still arrive, so the others are not stuck: call
// defer g.arrive(i) at the start of the attempt.
type gate struct {
	once []sync.Once
	ch   []chan struct{}
}

func newGate(parties int) *gate {
	g := &gate{once: make([]sync.Once, parties), ch: make([]chan struct{}, parties)}
	for i := range g.ch {
		g.ch[i] = make(chan struct{})
	}
	return g
}

// arrive marks party i as arrived; it may be called more than once.
func (g *gate) arrive(i int) { g.once[i].Do(func() { close(g.ch[i]) }) }

// await marks party i as arrived and waits for all the others.
func (g *gate) await(ctx context.Context, i int) error {
	g.arrive(i)
	for _, c := range g.ch {
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// concurrently runs f(0), ..., f(n-1) in goroutines and returns their errors.
func concurrently(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errs
}

// settleTimeout bounds how long a retry waits for the other call of a pair.
const settleTimeout = 10 * time.Second

// pair runs two conflicting calls. Their first attempts line up at gates;
// each later attempt first waits (settle) until the other call has
// returned, so that the retry runs after the conflicting transaction ended.
// Without that wait a quick retry can meet the other transaction still open
// and conflict with it again (seen on both engines: a second deadlock, a
// second 40001), which txretry handles by retrying once more, but which
// makes the number of runs depend on timing.
type pair struct {
	done [2]chan struct{}
}

func newPair() *pair {
	return &pair{done: [2]chan struct{}{make(chan struct{}), make(chan struct{})}}
}

// run runs call(0) and call(1) concurrently and returns their errors.
func (pr *pair) run(call func(party int) error) []error {
	return concurrently(2, func(i int) error {
		defer close(pr.done[i])
		return call(i)
	})
}

// settle waits, in attempts after the first, until the other party's call
// has returned.
func (pr *pair) settle(ctx context.Context, party int) error {
	if txretry.Attempt(ctx) <= 1 {
		return nil
	}
	timer := time.NewTimer(settleTimeout)
	defer timer.Stop()
	select {
	case <-pr.done[1-party]:
		return nil
	case <-timer.C:
		return fmt.Errorf("party %d retried but the other call has not returned within %v", party, settleTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// events records the events of calls, for assertions.
type events struct {
	mu   sync.Mutex
	list []txretry.Event
}

// option is WithObserver recording into e.
func (e *events) option() txretry.Option {
	return txretry.WithObserver(txretry.ObserverFunc(func(_ context.Context, ev txretry.Event) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.list = append(e.list, ev)
	}))
}

// of returns the recorded events of kind k.
func (e *events) of(k txretry.EventKind) []txretry.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []txretry.Event
	for _, ev := range e.list {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}
