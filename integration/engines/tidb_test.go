package engines

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/txretry"
)

// tidbDB is the test's database on the TiDB server of TXRETRY_TIDB_DSN.
type tidbDB struct {
	name string
	// cfg is the driver configuration of the test database, without
	// session variables: the server's defaults (pessimistic mode).
	cfg *mysql.Config
	// admin runs setup statements and reads results (pessimistic).
	admin *sql.DB
}

// newTiDB creates a database for the test on the TiDB server of
// TXRETRY_TIDB_DSN; it is dropped when the test ends.
func newTiDB(t *testing.T) *tidbDB {
	t.Helper()
	raw := requireEnv(t, envTiDBDSN, "tidb.sh")
	cfg, err := mysql.ParseDSN(raw)
	if err != nil {
		t.Fatalf("%s: %v", envTiDBDSN, err)
	}
	cfg.ParseTime = true
	cfg.Timeout = 5 * time.Second
	// go-sql-driver ignores contexts during COMMIT: readTimeout bounds it.
	cfg.ReadTimeout = 30 * time.Second
	cfg.WriteTimeout = 30 * time.Second
	d := &tidbDB{name: dbName(t)}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	server := cfg.Clone()
	server.DBName = ""
	c, err := mysql.NewConnector(server)
	if err != nil {
		t.Fatal(err)
	}
	sdb := sql.OpenDB(c)
	defer sdb.Close()
	var version string
	if err := sdb.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatalf("%s: %v", envTiDBDSN, err)
	}
	if !strings.Contains(version, "TiDB") {
		t.Fatalf("%s does not point to TiDB: VERSION() = %q", envTiDBDSN, version)
	}
	if _, err := sdb.ExecContext(ctx, "CREATE DATABASE "+d.name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := execOn(ctx, server, "DROP DATABASE IF EXISTS "+d.name); err != nil {
			t.Errorf("drop database %s: %v", d.name, err)
		}
	})
	d.cfg = cfg.Clone()
	d.cfg.DBName = d.name
	d.admin = openMySQL(t, d.cfg)
	return d
}

// open opens a pool on the test database whose every connection sets the
// session variables vars (name, value pairs; values are SQL literals), and
// checks them on one connection.
func (d *tidbDB) open(t *testing.T, vars ...string) *sql.DB {
	t.Helper()
	return d.openAt(t, "", vars...)
}

// openAt is open through addr (a fault proxy) instead of the server, when
// addr is not empty.
func (d *tidbDB) openAt(t *testing.T, addr string, vars ...string) *sql.DB {
	t.Helper()
	cfg := d.cfg.Clone()
	if addr != "" {
		cfg.Addr = addr
	}
	cfg.Params = map[string]string{}
	for i := 0; i+1 < len(vars); i += 2 {
		cfg.Params[vars[i]] = vars[i+1]
	}
	db := openMySQL(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i+1 < len(vars); i += 2 {
		var got string
		if err := db.QueryRowContext(ctx, "SELECT @@"+vars[i]).Scan(&got); err != nil {
			t.Fatalf("read @@%s: %v", vars[i], err)
		}
		if want := strings.Trim(vars[i+1], "'"); !strings.EqualFold(got, want) && !(want == "0" && got == "OFF") && !(want == "1" && got == "ON") {
			t.Fatalf("@@%s = %q on a pooled connection, want %q", vars[i], got, want)
		}
	}
	return db
}

// optimistic are the session variables of a pool in optimistic mode.
var optimistic = []string{"tidb_txn_mode", "'optimistic'"}

// exec runs setup statements.
func (d *tidbDB) exec(t *testing.T, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range stmts {
		if _, err := d.admin.ExecContext(ctx, s); err != nil {
			t.Fatalf("setup: %v", err)
		}
	}
}

// ints returns the single integer column of query's rows.
func (d *tidbDB) ints(t *testing.T, query string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := d.admin.QueryContext(ctx, query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// barrier lets the first attempts of two calls wait for each other.
type barrier struct {
	once [2]sync.Once
	ch   [2]chan struct{}
}

func newBarrier() *barrier {
	return &barrier{ch: [2]chan struct{}{make(chan struct{}), make(chan struct{})}}
}

// arrive marks party as arrived; later calls do nothing.
func (b *barrier) arrive(party int) { b.once[party].Do(func() { close(b.ch[party]) }) }

// await waits until the other party has arrived, or ctx ends.
func (b *barrier) await(ctx context.Context, party int) error {
	select {
	case <-b.ch[1-party]:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// both runs f(0) and f(1) concurrently and returns their errors.
func both(f func(party int) error) [2]error {
	var (
		wg   sync.WaitGroup
		errs [2]error
	)
	for i := range 2 {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errs
}

// tidbCode returns the MySQL error number of err as text, or "none".
func tidbCode(err error) string {
	if n, ok := mysqlerr.Number(err); ok {
		return fmt.Sprint(n)
	}
	return "none"
}

// TestTiDBPessimisticDeadlock: in pessimistic mode (TiDB's default), two
// transactions lock rows 1 then 2 and 2 then 1. TiDB's deadlock detector
// aborts one with 1213 (SQLSTATE 40001), which txretry retries by
// default; both calls succeed and each is applied exactly once. Each call
// has its own pool, as two services would, so that no contention manager
// orders them.
func TestTiDBPessimisticDeadlock(t *testing.T) {
	checkLeaks(t)
	d := newTiDB(t)
	d.exec(t,
		"CREATE TABLE accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
		"INSERT INTO accounts VALUES (1, 100), (2, 100)",
		"CREATE TABLE applied (party INT NOT NULL, attempt INT NOT NULL)")
	dbs := [2]*sql.DB{d.open(t), d.open(t)}
	var mode string
	if err := dbs[0].QueryRow("SELECT @@tidb_txn_mode").Scan(&mode); err != nil || mode != "pessimistic" {
		t.Fatalf("tidb_txn_mode = %q (%v), want the default pessimistic", mode, err)
	}
	b := newBarrier()
	var (
		runs   [2]atomic.Int32
		victim [2]atomic.Bool
		obs    [2]*counter
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := both(func(p int) error {
		obs[p] = newCounter()
		order := [2][2]int{{1, 2}, {2, 1}}[p]
		return txretry.RunInTx(ctx, dbs[p], func(ctx context.Context, tx *sql.Tx) error {
			runs[p].Add(1)
			first := txretry.Attempt(ctx) == 1
			if first {
				defer b.arrive(p)
			}
			if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = ?", order[0]); err != nil {
				return err
			}
			if first {
				b.arrive(p)
				if err := b.await(ctx, p); err != nil {
					return err
				}
			}
			_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = ?", order[1])
			if err != nil {
				if first && mysqlerr.IsDeadlock(err) {
					victim[p].Store(true)
				}
				return err
			}
			_, err = tx.ExecContext(ctx, "INSERT INTO applied VALUES (?, ?)", p, txretry.Attempt(ctx))
			return err
		}, txretry.WithObserver(obs[p]))
	})
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatalf("RunInTx: %s", errChain(err))
	}
	if victim[0].Load() == victim[1].Load() {
		t.Fatalf("deadlock victims: %v, %v; want exactly one (failed attempts: %s; %s)", victim[0].Load(), victim[1].Load(), obs[0], obs[1])
	}
	v := 0
	if victim[1].Load() {
		v = 1
	}
	if runs[v].Load() != 2 || runs[1-v].Load() != 1 {
		t.Errorf("fn runs: victim %d, other %d; want 2 and 1", runs[v].Load(), runs[1-v].Load())
	}
	if obs[v].failed("1213") != 1 {
		t.Errorf("victim: %s; want one attempt failed with 1213", obs[v])
	}
	t.Logf("victim: %s", obs[v])
	if got := d.ints(t, "SELECT balance FROM accounts ORDER BY id"); len(got) != 2 || got[0] != 102 || got[1] != 102 {
		t.Errorf("balances %v, want [102 102]: each call applied exactly once", got)
	}
	if got := d.ints(t, "SELECT party FROM applied ORDER BY party"); len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Errorf("applied parties %v, want [0 1]", got)
	}
}

// conflictAtCommit runs two calls on db that both increment the row of
// counters and, on their first attempts, both return from fn before either
// commits: in optimistic mode neither statement waits, and the second
// COMMIT finds the first one's write. read is the statement that reads
// the row first ("" for none). It returns both calls' errors, the fn runs,
// whether each first attempt's fn returned nil, and the observers.
func conflictAtCommit(t *testing.T, db *sql.DB, read string, opts ...txretry.Option) (errs [2]error, runs [2]int32, firstNil [2]bool, obs [2]*counter) {
	t.Helper()
	read1, wrote := newBarrier(), newBarrier()
	var (
		r  [2]atomic.Int32
		fn [2]atomic.Bool
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs = both(func(p int) error {
		obs[p] = newCounter()
		return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			r[p].Add(1)
			first := txretry.Attempt(ctx) == 1
			if first {
				defer read1.arrive(p)
				defer wrote.arrive(p)
			}
			if read != "" {
				var v int64
				if err := tx.QueryRowContext(ctx, read).Scan(&v); err != nil {
					return err
				}
			}
			if first {
				// Both transactions have their snapshot before either
				// writes.
				read1.arrive(p)
				if err := read1.await(ctx, p); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, "UPDATE counters SET v = v + 1 WHERE id = 1"); err != nil {
				return err
			}
			if first {
				wrote.arrive(p)
				if err := wrote.await(ctx, p); err != nil {
					return err
				}
				fn[p].Store(true)
			}
			return nil
		}, append([]txretry.Option{txretry.WithObserver(obs[p])}, opts...)...)
	})
	for p := range 2 {
		runs[p] = r[p].Load()
		firstNil[p] = fn[p].Load()
	}
	return errs, runs, firstNil, obs
}

// TestTiDBOptimisticConflicts: in optimistic mode, two transactions that
// update one row both reach COMMIT; the second one fails there with 9007
// (write conflict), also when both read the row with SELECT … FOR UPDATE
// first, which does not lock in optimistic mode. 9007 is not in txretry's
// default class: the loser's error is returned untouched, after one
// attempt, and its update is not applied. With
// WithRetryOn(mysqlerr.IsTiDBRetryable) the loser is run again and both
// increments are applied.
//
// 8002 (ErrForUpdateCantRetry) cannot be provoked here: TiDB returns it
// only when its own automatic retry of an optimistic transaction meets
// SELECT … FOR UPDATE, and that retry needs tidb_disable_txn_auto_retry =
// OFF, which TiDB v8 accepts with a deprecation warning and ignores.
func TestTiDBOptimisticConflicts(t *testing.T) {
	checkLeaks(t)
	cases := []struct {
		name string
		vars []string
		read string
		code uint16
	}{
		{"9007-write-conflict", optimistic, "SELECT v FROM counters WHERE id = 1", mysqlerr.TiDBWriteConflict},
		{"9007-select-for-update", optimistic, "SELECT v FROM counters WHERE id = 1 FOR UPDATE", mysqlerr.TiDBWriteConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newTiDB(t)
			d.exec(t, "CREATE TABLE counters (id INT PRIMARY KEY, v BIGINT NOT NULL)",
				"INSERT INTO counters VALUES (1, 0)")
			db := d.open(t, tc.vars...)
			code := fmt.Sprint(tc.code)

			t.Run("default", func(t *testing.T) {
				errs, runs, firstNil, obs := conflictAtCommit(t, db, tc.read)
				loser := 0
				if errs[0] == nil {
					loser = 1
				}
				if errs[1-loser] != nil || errs[loser] == nil {
					t.Fatalf("errors %v / %v; want exactly one call to fail", errs[0], errs[1])
				}
				err := errs[loser]
				var re *txretry.RetryError
				if n, _ := mysqlerr.Number(err); n != tc.code || errors.As(err, &re) || errors.Is(err, txretry.ErrCommitUncertain) {
					t.Fatalf("loser's error: %s; want %s returned untouched", errChain(err), code)
				}
				if !firstNil[loser] {
					t.Errorf("the loser's fn did not return nil: %s did not come at COMMIT", code)
				}
				if runs[0] != 1 || runs[1] != 1 {
					t.Errorf("fn runs %v, want 1 each (no retry)", runs)
				}
				if obs[loser].failed(code) != 1 {
					t.Errorf("loser: %s; want one failed attempt with %s", obs[loser], code)
				}
				if got := d.ints(t, "SELECT v FROM counters"); len(got) != 1 || got[0] != 1 {
					t.Errorf("counter %v, want [1]: only the winner's increment", got)
				}
			})

			t.Run("IsTiDBRetryable", func(t *testing.T) {
				before := d.ints(t, "SELECT v FROM counters")[0]
				errs, runs, firstNil, obs := conflictAtCommit(t, db, tc.read, txretry.WithRetryOn(mysqlerr.IsTiDBRetryable))
				if err := errors.Join(errs[:]...); err != nil {
					t.Fatalf("RunInTx: %s", errChain(err))
				}
				loser := 0
				if runs[1] == 2 {
					loser = 1
				}
				if runs[loser] != 2 || runs[1-loser] != 1 {
					t.Fatalf("fn runs %v; want 1 and 2", runs)
				}
				if !firstNil[loser] {
					t.Errorf("the loser's first fn did not return nil: %s did not come at COMMIT", code)
				}
				if obs[loser].failed(code) != 1 {
					t.Errorf("loser: %s; want one failed attempt with %s", obs[loser], code)
				}
				if got := d.ints(t, "SELECT v FROM counters")[0]; got != before+2 {
					t.Errorf("counter %d, want %d: both increments exactly once", got, before+2)
				}
			})
		})
	}
}

// TestTiDBSchemaChanged: a transaction that wrote a table whose definition
// another session changed before its COMMIT fails at COMMIT with 8028
// (ErrInfoSchemaChanged) when TiDB's metadata lock is off (with it on,
// the default, the DDL waits for the transaction instead). TiDB checks the
// schema before the commit point and rolls back, so txretry does not count
// 8028 at COMMIT as uncertain; it is opt-in (IsTiDBRetryable): returned
// untouched by default, retried to success with it.
func TestTiDBSchemaChanged(t *testing.T) {
	checkLeaks(t)
	d := newTiDB(t)
	d.exec(t, "CREATE TABLE counters (id INT PRIMARY KEY, v BIGINT NOT NULL)",
		"INSERT INTO counters VALUES (1, 0)")
	setGlobal(t, d, "tidb_enable_metadata_lock", "OFF")
	for _, mode := range []struct {
		name string
		vars []string
	}{{"pessimistic", nil}, {"optimistic", optimistic}} {
		t.Run(mode.name, func(t *testing.T) {
			db := d.open(t, mode.vars...)
			var column atomic.Int32
			run := func(opts ...txretry.Option) (error, int32, *counter) {
				obs := newCounter()
				var runs atomic.Int32
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
					runs.Add(1)
					if _, err := tx.ExecContext(ctx, "UPDATE counters SET v = v + 1 WHERE id = 1"); err != nil {
						return err
					}
					if txretry.Attempt(ctx) == 1 {
						// Another session changes the table's definition.
						col := fmt.Sprintf("c%d_%d", len(mode.name), column.Add(1))
						//txretryvet:ok the rival session whose DDL the attempt must lose to
						if _, err := d.admin.ExecContext(ctx, "ALTER TABLE counters ADD COLUMN "+col+" INT"); err != nil {
							return fmt.Errorf("concurrent DDL: %w", err)
						}
					}
					return nil
				}, append([]txretry.Option{txretry.WithObserver(obs)}, opts...)...)
				return err, runs.Load(), obs
			}

			before := d.ints(t, "SELECT v FROM counters")[0]
			err, runs, obs := run()
			var re *txretry.RetryError
			if n, _ := mysqlerr.Number(err); n != mysqlerr.TiDBInfoSchemaChanged || errors.As(err, &re) ||
				errors.Is(err, txretry.ErrCommitUncertain) || runs != 1 {
				t.Fatalf("default: err %s after %d runs; want 8028 untouched after 1 (%s)", errChain(err), runs, obs)
			}
			if got := d.ints(t, "SELECT v FROM counters")[0]; got != before {
				t.Errorf("counter %d after the failed call, want %d", got, before)
			}
			err, runs, obs = run(txretry.WithRetryOn(mysqlerr.IsTiDBRetryable))
			if err != nil || runs != 2 || obs.failed("8028") != 1 {
				t.Fatalf("IsTiDBRetryable: err %v after %d runs; want success after 2 (%s)", err, runs, obs)
			}
			if got := d.ints(t, "SELECT v FROM counters")[0]; got != before+1 {
				t.Errorf("counter %d, want %d: applied exactly once", got, before+1)
			}
		})
	}
}

// setGlobal sets a global system variable for the test and restores its
// value when the test ends.
func setGlobal(t *testing.T, d *tidbDB, name, value string) {
	t.Helper()
	var old string
	if err := d.admin.QueryRow("SELECT @@GLOBAL." + name).Scan(&old); err != nil {
		t.Fatalf("read @@GLOBAL.%s: %v", name, err)
	}
	d.exec(t, "SET GLOBAL "+name+" = "+value)
	t.Cleanup(func() {
		if _, err := d.admin.Exec("SET GLOBAL " + name + " = '" + old + "'"); err != nil {
			t.Errorf("restore @@GLOBAL.%s: %v", name, err)
		}
	})
}

// lostCommitMode is a pool configuration of the lost-commit tests.
type lostCommitMode struct {
	name string
	vars []string
}

// lostCommitModes are the modes in which WithCommitMarker works on TiDB:
// pessimistic, and optimistic with tidb_constraint_check_in_place on, so
// that the probe's INSERT checks the key at once.
var lostCommitModes = []lostCommitMode{
	{"pessimistic", nil},
	{"optimistic-check-in-place", append([]string{"tidb_constraint_check_in_place", "1"}, optimistic...)},
}

// effects prepares the effect table (not unique, so that a duplicate
// shows) and the marker table.
func (d *tidbDB) effects(t *testing.T) {
	t.Helper()
	d.exec(t, "CREATE TABLE effects (id VARCHAR(64) NOT NULL, attempt INT NOT NULL, KEY (id))", mustDDL(t))
}

// insertEffect runs one call on db whose only effect is a row for id.
func insertEffect(db *sql.DB, id string, runs *atomic.Int32, opts ...txretry.Option) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		runs.Add(1)
		_, err := tx.ExecContext(ctx, "INSERT INTO effects VALUES (?, ?)", id, txretry.Attempt(ctx))
		return err
	}, opts...)
}

// count returns how many times effect id was applied.
func (d *tidbDB) count(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := d.admin.QueryRow("SELECT COUNT(*) FROM effects WHERE id = ?", id).Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

// TestTiDBLostCommit loses COMMITs on purpose with a fault proxy between
// go-sql-driver and TiDB: dropped before it reached the server (TiDB rolls
// back when the connection closes) or after the server answered it (TiDB
// committed). Without a verifier the call returns ErrCommitUncertain after
// one run and the effect is on the server exactly when it committed; with
// WithCommitMarker the commit is resolved: re-run once when it did not
// commit, not re-run when it did, the effect applied exactly once.
func TestTiDBLostCommit(t *testing.T) {
	checkLeaks(t)
	d := newTiDB(t)
	d.effects(t)
	proxy, err := faultproxy.Start(d.cfg.Addr, faultproxy.MySQL)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() { proxy.Close() })
	faults := []struct {
		fault     faultproxy.Fault
		committed bool
	}{{faultproxy.DropBeforeCommit, false}, {faultproxy.DropAfterCommit, true}}
	for _, mode := range lostCommitModes {
		db := d.openAt(t, proxy.Addr(), mode.vars...)
		for _, f := range faults {
			for _, verifier := range []string{"none", "commit-marker"} {
				t.Run(mode.name+"/"+f.fault.String()+"/"+verifier, func(t *testing.T) {
					for i := range 2 {
						id := fmt.Sprintf("%s-%s-%s-%d", mode.name, f.fault, verifier, i)
						obs := newCounter()
						opts := []txretry.Option{txretry.WithObserver(obs), txretry.WithVerifyTimeout(20 * time.Second)}
						if verifier == "commit-marker" {
							opts = append(opts, txretry.WithCommitMarker(markerTable))
						}
						var runs atomic.Int32
						proxy.Arm(f.fault)
						err := insertEffect(db, id, &runs, opts...)
						checkLostCommit(t, d, id, err, runs.Load(), obs, verifier, f.committed)
					}
				})
			}
		}
		waitIdle(t, db)
	}
	if st := proxy.Stats(); st.Faults[faultproxy.DropBeforeCommit] == 0 || st.Faults[faultproxy.DropAfterCommit] == 0 {
		t.Errorf("proxy stats %+v: not every fault was injected", st)
	}
}

// TestTiDBCommitMarkerOptimisticLazyCheck: with TiDB's default
// tidb_constraint_check_in_place = OFF, an optimistic INSERT of an existing
// key succeeds and the duplicate is reported only at COMMIT, so the
// verifier's probe (an INSERT it rolls back) cannot see a committed
// marker. Its "not committed" would be wrong (and once was: the effect was
// applied twice). The verifier notices the session's settings and leaves
// the commit uncertain at once, naming the variable; with it ON (the
// advice for the pool) the probe is right, which TestTiDBLostCommit checks.
func TestTiDBCommitMarkerOptimisticLazyCheck(t *testing.T) {
	checkLeaks(t)
	d := newTiDB(t)
	d.effects(t)
	proxy, err := faultproxy.Start(d.cfg.Addr, faultproxy.MySQL)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() { proxy.Close() })
	db := d.openAt(t, proxy.Addr(), append([]string{"tidb_constraint_check_in_place", "0"}, optimistic...)...)
	obs := newCounter()
	var runs atomic.Int32
	proxy.Arm(faultproxy.DropAfterCommit)
	err = insertEffect(db, "lazy", &runs, txretry.WithCommitMarker(markerTable), txretry.WithObserver(obs))
	t.Logf("RunInTx: %s; %s", errChain(err), obs)
	if !errors.Is(err, txretry.ErrCommitUncertain) || !strings.Contains(err.Error(), "tidb_constraint_check_in_place") {
		t.Errorf("RunInTx = %v; want ErrCommitUncertain naming tidb_constraint_check_in_place", err)
	}
	if runs.Load() != 1 || d.count(t, "lazy") != 1 || obs.verifications(txretry.VerifiedNotCommitted) != 0 {
		t.Errorf("%s, %d runs, effect applied %d times; want 1 run, the effect once, no 'not committed' verdict",
			obs, runs.Load(), d.count(t, "lazy"))
	}
	waitIdle(t, db)
}

// checkLostCommit checks the outcome of a call whose COMMIT was lost.
func checkLostCommit(t *testing.T, d *tidbDB, id string, err error, runs int32, obs *counter, verifier string, committed bool) {
	t.Helper()
	if verifier == "none" {
		var ue *txretry.CommitUncertainError
		if !errors.As(err, &ue) || ue.Verifier != "" {
			t.Fatalf("err = %s; want ErrCommitUncertain without verifier", errChain(err))
		}
		if runs != 1 {
			t.Fatalf("fn ran %d times: an uncertain commit must not be re-run", runs)
		}
		if got := d.count(t, id); got != b2i(committed) {
			t.Fatalf("effect applied %d times, want %d", got, b2i(committed))
		}
		return
	}
	if err != nil {
		t.Fatalf("err = %s; want the verifier to resolve the commit (%s)", errChain(err), obs)
	}
	want := txretry.VerifiedNotCommitted
	if committed {
		want = txretry.VerifiedCommitted
	}
	if obs.verifications(want) != 1 {
		t.Errorf("%s; want one %v verification", obs, want)
	}
	if got := d.count(t, id); got != 1 {
		t.Fatalf("effect applied %d times, want exactly once (%s)", got, obs)
	}
	if wantRuns := int32(1 + b2i(!committed)); runs != wantRuns {
		t.Fatalf("fn ran %d times, want %d", runs, wantRuns)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitIdle waits until db has no connection in use.
func waitIdle(t *testing.T, db *sql.DB) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); db.Stats().InUse != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still in use", db.Stats().InUse)
		}
	}
}

// failpoint sets (term non-empty) or removes a failpoint through TiDB's
// status API, which tidb.sh enables. It reports false if the server has no
// failpoint API (a build without failpoints).
func failpoint(t *testing.T, status, name, term string) bool {
	t.Helper()
	method, body := http.MethodPut, strings.NewReader(term)
	if term == "" {
		method = http.MethodDelete
	}
	req, err := http.NewRequest(method, "http://"+status+"/fail/"+name, body)
	if err != nil {
		t.Fatal(err)
	}
	// No keep-alive: no connection outlives the call.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("failpoint API: %v", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound && strings.Contains(string(msg), "404 page not found"):
		return false
	case method == http.MethodDelete && resp.StatusCode == http.StatusBadRequest && strings.Contains(string(msg), "failed to delete failpoint"):
		return true // it was not set
	case resp.StatusCode/100 != 2:
		t.Fatalf("failpoint API: %s %s: %s %q", method, name, resp.Status, msg)
	}
	return true
}

// commitTxnRetryable is the failpoint of TiDB's session that fails a
// COMMIT with 8022 (ErrTxnRetryable) before committing anything.
const commitTxnRetryable = "github.com/pingcap/tidb/pkg/session/mockCommitError8942"

// TestTiDBTxnRetryableAtCommit: 8022 (ErrTxnRetryable, "KV error safe to
// retry"), which TiDB derives from TiKV's retryable key errors, made here
// by a failpoint of TiDB's session that returns it from COMMIT before
// committing. It is opt-in and proves a rollback at COMMIT: returned
// untouched by default, retried to success with IsTiDBRetryable.
func TestTiDBTxnRetryableAtCommit(t *testing.T) {
	checkLeaks(t)
	d := newTiDB(t)
	status := tidbFailpoints(t, d)
	d.effects(t)
	db := d.open(t)
	t.Run("default", func(t *testing.T) {
		onFailpoint(t, d, status, commitTxnRetryable, func(id string) bool {
			var runs atomic.Int32
			err := insertEffect(db, id, &runs)
			if err == nil {
				return false
			}
			var re *txretry.RetryError
			if n, _ := mysqlerr.Number(err); n != mysqlerr.TiDBTxnRetryable || errors.As(err, &re) ||
				errors.Is(err, txretry.ErrCommitUncertain) || runs.Load() != 1 {
				t.Fatalf("err %s after %d runs; want 8022 untouched after 1", errChain(err), runs.Load())
			}
			if got := d.count(t, id); got != 0 {
				t.Errorf("effect applied %d times, want 0", got)
			}
			return true
		})
	})
	t.Run("IsTiDBRetryable", func(t *testing.T) {
		onFailpoint(t, d, status, commitTxnRetryable, func(id string) bool {
			obs := newCounter()
			var runs atomic.Int32
			err := insertEffect(db, id, &runs, txretry.WithRetryOn(mysqlerr.IsTiDBRetryable), txretry.WithObserver(obs))
			if err != nil {
				t.Fatalf("RunInTx: %s", errChain(err))
			}
			if obs.failed("8022") == 0 {
				return false
			}
			if got := d.count(t, id); runs.Load() != 2 || got != 1 {
				t.Errorf("%d runs, effect applied %d times; want 2 runs, applied once (%s)", runs.Load(), got, obs)
			}
			return true
		})
	})
	waitIdle(t, db)
}

// tidbFailpoints returns TiDB's status address after checking that the
// server has the failpoint API, or skips (fails under CI) the test.
func tidbFailpoints(t *testing.T, d *tidbDB) string {
	t.Helper()
	status := requireEnv(t, envTiDBStatus, "tidb.sh")
	if !failpoint(t, status, commitTxnRetryable, "") {
		unavailable(t, "the TiDB server at "+status+" has no failpoint API: start it with integration/cluster/tidb.sh, whose build enables failpoints")
	}
	return status
}

// onFailpoint arms failpoint name for one shot, runs call with a fresh
// effect id and disarms it. TiDB's background transactions (statistics,
// TTL) can take the shot: while call reports that the failpoint did not
// hit it, its effect is deleted and the failpoint armed again, up to 5
// times.
func onFailpoint(t *testing.T, d *tidbDB, status, name string, call func(id string) (hit bool)) {
	t.Helper()
	t.Cleanup(func() { failpoint(t, status, name, "") })
	for try := 1; try <= 5; try++ {
		id := fmt.Sprintf("fp-%d-%s", try, randomHex(4))
		failpoint(t, status, name, "1*return(true)")
		hit := call(id)
		failpoint(t, status, name, "")
		if hit {
			return
		}
		d.exec(t, "DELETE FROM effects WHERE id = '"+id+"'")
	}
	t.Fatalf("5 calls ran without failpoint %s firing on them", name)
}
