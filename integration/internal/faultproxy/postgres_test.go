package faultproxy

import (
	"context"
	"crypto/tls"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgEnv is a PostgreSQL server reached directly, with a fresh table.
type pgEnv struct {
	cfg      *pgx.ConnConfig
	upstream string
	direct   *pgx.Conn
	table    string
}

func newPGEnv(t *testing.T) *pgEnv {
	t.Helper()
	dsn := dsnFromEnv(t, envPostgresDSN, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("%s: %v", envPostgresDSN, err)
	}
	if cfg.Port == 0 || len(cfg.Host) > 0 && cfg.Host[0] == '/' {
		t.Fatalf("%s must name a TCP host and port", envPostgresDSN)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	direct, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		unavailable(t, "PostgreSQL from "+envPostgresDSN+" is unreachable: "+err.Error())
	}
	t.Cleanup(func() { closePgx(t, direct) })
	e := &pgEnv{
		cfg:      cfg,
		upstream: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))),
		direct:   direct,
		table:    tableName("pg"),
	}
	if _, err := direct.Exec(ctx, "create table "+e.table+" (id bigint primary key)"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := direct.Exec(ctx, "drop table "+e.table); err != nil {
			t.Errorf("drop table: %v", err)
		}
	})
	return e
}

// proxyConfig returns the connection config for reaching the server
// through p, without TLS (the proxy refuses it).
func (e *pgEnv) proxyConfig(t *testing.T, p *Proxy) *pgx.ConnConfig {
	t.Helper()
	host, port, err := net.SplitHostPort(p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	c := e.cfg.Copy()
	c.Host, c.Port = host, uint16(n)
	c.TLSConfig = nil
	c.Fallbacks = nil
	return c
}

func (e *pgEnv) insertSQL() string { return "insert into " + e.table + " (id) values ($1)" }

func (e *pgEnv) exists(t *testing.T, id int64) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ok bool
	err := e.direct.QueryRow(ctx, "select exists (select 1 from "+e.table+" where id = $1)", id).Scan(&ok)
	if err != nil {
		t.Fatalf("direct lookup: %v", err)
	}
	return ok
}

// closePgx closes conn and waits for pgx's asynchronous cleanup of a broken
// connection (which sends the CancelRequest) to end.
func closePgx(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	startClosePgx(conn)()
	waitCleanup(t, conn)
}

// startClosePgx closes conn without waiting for pgx's asynchronous cleanup;
// the caller must wait with waitCleanup.
func startClosePgx(conn *pgx.Conn) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}
}

// waitCleanup waits for pgx's asynchronous cleanup of conn. pgx sends the
// CancelRequest, then Terminate, then reads until the server closes the
// connection (for at most 15 seconds).
func waitCleanup(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	select {
	case <-conn.PgConn().CleanupDone():
	case <-time.After(30 * time.Second):
		t.Error("pgx connection cleanup did not finish")
	}
}

// pgxCommit is one way of committing with pgx native.
type pgxCommit struct {
	name string
	mode pgx.QueryExecMode
	// prepare runs on the fresh connection before the transaction.
	prepare func(ctx context.Context, conn *pgx.Conn) error
	commit  func(ctx context.Context, conn *pgx.Conn, tx pgx.Tx) error
}

// commitStmt is the name of the prepared COMMIT statement.
const commitStmt = "faultproxy_commit"

var pgxCommits = []pgxCommit{
	{
		// The INSERT goes through Parse/Describe/Sync and Bind/Execute/Sync;
		// pgx sends COMMIT (no arguments) as a simple Query.
		name:   "pgx/cache_statement",
		mode:   pgx.QueryExecModeCacheStatement,
		commit: func(ctx context.Context, _ *pgx.Conn, tx pgx.Tx) error { return tx.Commit(ctx) },
	},
	{
		// default_query_exec_mode=simple_protocol: every statement is a
		// simple Query.
		name:   "pgx/simple_protocol",
		mode:   pgx.QueryExecModeSimpleProtocol,
		commit: func(ctx context.Context, _ *pgx.Conn, tx pgx.Tx) error { return tx.Commit(ctx) },
	},
	{
		// COMMIT as a named prepared statement: Bind/Describe/Execute/Sync
		// in a batch after the Parse.
		name: "pgx/extended_named",
		mode: pgx.QueryExecModeCacheStatement,
		prepare: func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Prepare(ctx, commitStmt, "COMMIT")
			return err
		},
		commit: func(ctx context.Context, conn *pgx.Conn, _ pgx.Tx) error {
			_, err := conn.Exec(ctx, commitStmt)
			return err
		},
	},
	{
		// COMMIT through the unnamed statement: Parse/Bind/Describe/
		// Execute/Sync in one batch.
		name: "pgx/extended_unnamed",
		mode: pgx.QueryExecModeCacheStatement,
		commit: func(ctx context.Context, conn *pgx.Conn, _ pgx.Tx) error {
			return conn.PgConn().ExecParams(ctx, "commit", nil, nil, nil, nil).Read().Err
		},
	},
}

// pgxClient commits over a fresh pgx connection each time.
func pgxClient(e *pgEnv, p *Proxy, cfg *pgx.ConnConfig, c pgxCommit) client {
	return client{
		commitRow: func(t *testing.T, id int64, timeout time.Duration) error {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatalf("connect through proxy: %v", err)
			}
			defer func() {
				startClosePgx(conn)()
				if timeout > 0 {
					// A stalled connection is cleaned up only once the
					// reply is released: wait at the end of the test.
					t.Cleanup(func() { waitCleanup(t, conn) })
					return
				}
				waitCleanup(t, conn)
			}()
			if c.prepare != nil {
				if err := c.prepare(ctx, conn); err != nil {
					t.Fatalf("prepare: %v", err)
				}
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			if _, err := tx.Exec(ctx, e.insertSQL(), id); err != nil {
				t.Fatalf("insert: %v", err)
			}
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			return c.commit(ctx, conn, tx)
		},
		exists:   e.exists,
		classify: classifyPgx,
	}
}

// classifyPgx reports how pgx's error helpers see a commit error.
func classifyPgx(err error) string {
	return fmt.Sprintf("Is(pgconn.ErrConnClosed)=%v Is(io.ErrUnexpectedEOF)=%v Is(context.Canceled)=%v Is(context.DeadlineExceeded)=%v pgconn.SafeToRetry=%v pgconn.Timeout=%v",
		errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		pgconn.SafeToRetry(err), pgconn.Timeout(err))
}

// sqlClient commits through database/sql; timeout cancels the transaction's
// context while COMMIT runs (database/sql drivers take the commit's context
// from BeginTx).
func sqlClient(db *sql.DB, insertSQL string, exists func(*testing.T, int64) bool, classify func(error) string) client {
	return client{
		commitRow: func(t *testing.T, id int64, timeout time.Duration) error {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			if _, err := tx.ExecContext(ctx, insertSQL, id); err != nil {
				t.Fatalf("insert: %v", err)
			}
			if timeout > 0 {
				timer := time.AfterFunc(timeout, cancel)
				defer timer.Stop()
			}
			return tx.Commit()
		},
		exists:   exists,
		classify: classify,
	}
}

func TestPostgresFaults(t *testing.T) {
	e := newPGEnv(t)
	for _, c := range pgxCommits {
		t.Run(c.name, func(t *testing.T) {
			p := startProxy(t, e.upstream, Postgres)
			cfg := e.proxyConfig(t, p)
			cfg.DefaultQueryExecMode = c.mode
			runFaultCases(t, p, pgxClient(e, p, cfg, c))
		})
	}
	t.Run("pgx/stdlib", func(t *testing.T) {
		p := startProxy(t, e.upstream, Postgres)
		db := stdlib.OpenDB(*e.proxyConfig(t, p))
		t.Cleanup(func() { _ = db.Close() })
		runFaultCases(t, p, sqlClient(db, e.insertSQL(), e.exists, func(err error) string {
			return classifyPgx(err) + fmt.Sprintf(" Is(driver.ErrBadConn)=%v", errors.Is(err, driver.ErrBadConn))
		}))
	})
}

// TestPostgresStallDoesNotBlockOthers stalls one COMMIT, commits on another
// connection meanwhile, then releases the stalled reply to its client.
func TestPostgresStallDoesNotBlockOthers(t *testing.T) {
	e := newPGEnv(t)
	p := startProxy(t, e.upstream, Postgres)
	cl := pgxClient(e, p, e.proxyConfig(t, p), pgxCommits[0])

	stalledID := nextID()
	p.Arm(StallReply)
	var wg sync.WaitGroup
	var stalledErr error
	wg.Go(func() { stalledErr = cl.commitRow(t, stalledID, 0) })
	waitFor(t, "the stall", func() bool { return p.Stats().Faults[StallReply] == 1 })

	id := nextID()
	if err := cl.commitRow(t, id, 0); err != nil {
		t.Fatalf("commit beside a stalled one: %v", err)
	}
	if !e.exists(t, id) {
		t.Fatal("row missing")
	}

	p.Release()
	wg.Wait()
	if stalledErr != nil {
		t.Fatalf("released commit: %v", stalledErr)
	}
	if !e.exists(t, stalledID) {
		t.Fatal("released row missing")
	}
}

// TestPostgresCloseReleasesStall closes the proxy while a reply is stalled.
func TestPostgresCloseReleasesStall(t *testing.T) {
	e := newPGEnv(t)
	p, err := Start(e.upstream, Postgres)
	if err != nil {
		t.Fatal(err)
	}
	cl := pgxClient(e, p, e.proxyConfig(t, p), pgxCommits[0])
	p.BlockCancelRequests(true)
	p.Arm(StallReply)
	done := make(chan error, 1)
	go func() { done <- cl.commitRow(t, nextID(), 0) }()
	waitFor(t, "the stall", func() bool { return p.Stats().Faults[StallReply] == 1 })
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-done; err == nil {
		t.Fatal("commit through a closed proxy returned no error")
	} else {
		t.Logf("commit error after Close: %s", describeErr(err))
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestPostgresCancelRequests checks that pgx sends a CancelRequest when it
// closes a connection broken at COMMIT, and that the proxy counts it as
// blocked or forwarded.
func TestPostgresCancelRequests(t *testing.T) {
	e := newPGEnv(t)
	tests := []struct {
		block              bool
		blocked, forwarded int
	}{
		{block: true, blocked: 1},
		{block: false, forwarded: 1},
	}
	for _, tt := range tests {
		t.Run("block="+strconv.FormatBool(tt.block), func(t *testing.T) {
			p := startProxy(t, e.upstream, Postgres)
			cl := pgxClient(e, p, e.proxyConfig(t, p), pgxCommits[0])
			p.BlockCancelRequests(tt.block)
			p.Arm(DropBeforeCommit)
			if err := cl.commitRow(t, nextID(), 0); err == nil {
				t.Fatal("commit returned no error")
			}
			// commitRow waited for pgx's cleanup, which sent the request.
			s := p.Stats()
			if s.CancelRequestsBlocked != tt.blocked || s.CancelRequestsForwarded != tt.forwarded {
				t.Fatalf("cancel requests blocked/forwarded = %d/%d, want %d/%d",
					s.CancelRequestsBlocked, s.CancelRequestsForwarded, tt.blocked, tt.forwarded)
			}
			if s.Conns != 1 {
				t.Errorf("Stats().Conns = %d, want 1 (cancel requests are not counted)", s.Conns)
			}
		})
	}
}

// TestPostgresCancelReachesServer shows what blocking is for: a forwarded
// CancelRequest stops a running statement, a blocked one does not.
func TestPostgresCancelReachesServer(t *testing.T) {
	e := newPGEnv(t)
	for _, block := range []bool{false, true} {
		t.Run("block="+strconv.FormatBool(block), func(t *testing.T) {
			p := startProxy(t, e.upstream, Postgres)
			p.BlockCancelRequests(block)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := pgx.ConnectConfig(ctx, e.proxyConfig(t, p))
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			pid := conn.PgConn().PID()
			qctx, qcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, err = conn.Exec(qctx, "select pg_sleep(30)")
			qcancel()
			if err == nil {
				t.Fatal("sleep returned no error")
			}
			startClosePgx(conn)()
			// The server closes the connection only after the statement
			// ended; until then pgx's cleanup waits.
			defer waitCleanup(t, conn)
			active := func() bool {
				var n int
				err := e.direct.QueryRow(ctx,
					"select count(*) from pg_stat_activity where pid = $1 and state = 'active'", pid).Scan(&n)
				if err != nil {
					t.Fatalf("pg_stat_activity: %v", err)
				}
				return n == 1
			}
			if block {
				waitFor(t, "the cancel request", func() bool { return p.Stats().CancelRequestsBlocked == 1 })
				time.Sleep(500 * time.Millisecond)
				if !active() {
					t.Error("statement stopped although the cancel request was blocked")
				}
				if _, err := e.direct.Exec(ctx, "select pg_terminate_backend($1)", pid); err != nil {
					t.Fatalf("pg_terminate_backend: %v", err)
				}
				return
			}
			waitFor(t, "the cancel request", func() bool { return p.Stats().CancelRequestsForwarded == 1 })
			waitFor(t, "the canceled statement to stop", func() bool { return !active() })
		})
	}
}

// TestPostgresPolicy checks that the policy chooses per COMMIT and that an
// armed fault takes precedence.
func TestPostgresPolicy(t *testing.T) {
	e := newPGEnv(t)
	p := startProxy(t, e.upstream, Postgres)
	type call struct{ conn, commit int }
	var mu sync.Mutex
	var calls []call
	p.SetPolicy(func(conn, commit int) Fault {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, call{conn, commit})
		if commit == 2 {
			return DropBeforeCommit
		}
		return None
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, e.proxyConfig(t, p))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer closePgx(t, conn)
	ids := []int64{nextID(), nextID(), nextID()}
	commitOn := func(id int64) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		if _, err := tx.Exec(ctx, e.insertSQL(), id); err != nil {
			t.Fatalf("insert: %v", err)
		}
		return tx.Commit(ctx)
	}
	if err := commitOn(ids[0]); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	if err := commitOn(ids[1]); err == nil {
		t.Fatal("second commit returned no error")
	}
	if e.exists(t, ids[1]) {
		t.Fatal("row of the dropped commit exists")
	}

	// Armed faults win over the policy, which is then not called.
	p.Arm(DropAfterCommit)
	if err := pgxClient(e, p, e.proxyConfig(t, p), pgxCommits[0]).commitRow(t, ids[2], 0); err == nil {
		t.Fatal("armed commit returned no error")
	}
	if !e.exists(t, ids[0]) || !e.exists(t, ids[2]) {
		t.Fatal("committed rows missing")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []call{{1, 1}, {1, 2}}
	if len(calls) != len(want) || calls[0] != want[0] || calls[1] != want[1] {
		t.Fatalf("policy calls = %v, want %v", calls, want)
	}
	s := p.Stats()
	if s.Commits != 3 || s.Faults[DropBeforeCommit] != 1 || s.Faults[DropAfterCommit] != 1 {
		t.Fatalf("Stats() = %+v", s)
	}
}

// TestPostgresRefusesTLS checks that the proxy answers SSLRequest with 'N'
// and that pgx then falls back to a plain connection.
func TestPostgresRefusesTLS(t *testing.T) {
	e := newPGEnv(t)
	p := startProxy(t, e.upstream, Postgres)
	cfg := e.proxyConfig(t, p)
	cfg.TLSConfig = &tls.Config{ServerName: "localhost", MinVersion: tls.VersionTLS12}
	cfg.Fallbacks = []*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect with TLS preferred: %v", err)
	}
	defer closePgx(t, conn)
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	var pgErr *pgconn.PgError
	if _, err := conn.Exec(ctx, "select 1/0"); !errors.As(err, &pgErr) {
		t.Fatalf("server error not passed through: %v", err)
	}
}
