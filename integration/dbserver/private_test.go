//go:build unix

package dbserver

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// startPrivate starts a private server of e for t, closed when t ends. It
// fails the test when the binaries are missing, as throwaway does.
func startPrivate(t *testing.T, e Engine) *Private {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), LocalTimeout)
	defer cancel()
	p, err := StartPrivate(ctx, e)
	if err != nil {
		t.Fatalf("private %s: %v", e, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close %s: %v", p, err)
		}
	})
	return p
}

// openDB opens dsn with e's driver, closed when t ends.
func openDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// mustExec runs each statement on db.
func mustExec(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// count returns SELECT count(*) FROM t on db.
func count(t *testing.T, db *sql.DB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

// refused fails t unless a new connection to db is refused.
func refused(t *testing.T, db *sql.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db.SetMaxIdleConns(0) // no pooled connection answers for the server
	if err := db.PingContext(ctx); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("ping a stopped server: %v, want connection refused", err)
	}
	db.SetMaxIdleConns(2)
}

// TestPrivateStopStartSamePort stops a private server cleanly and kills it,
// starting it again each time: it comes back on the same port with its
// data, and is refused in between. The engines' servers, and the test,
// run beside the other tests that start servers.
func TestPrivateStopStartSamePort(t *testing.T) {
	t.Parallel()
	for _, e := range []Engine{Postgres, MySQL} {
		t.Run(e.String(), func(t *testing.T) {
			t.Parallel()
			p := startPrivate(t, e)
			if p.Source != "private server" || p.Port() == 5432 || p.Port() == 3306 {
				t.Errorf("Source %q, port %d: want a private server on a free port", p.Source, p.Port())
			}
			db := openDB(t, e.Driver(), p.DSN)
			mustExec(t, db, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)")
			port, pid := p.Port(), p.Pid()
			for i, halt := range []func() error{p.Stop, p.Kill} {
				if err := halt(); err != nil {
					t.Fatalf("halt %d: %v", i, err)
				}
				if alive(pid) {
					t.Errorf("halt %d: server %d still running", i, pid)
				}
				if p.Pid() != 0 {
					t.Errorf("halt %d: Pid %d, want 0", i, p.Pid())
				}
				refused(t, db)
				if err := p.Start(context.Background()); err != nil {
					t.Fatalf("start %d: %v", i, err)
				}
				if p.Port() != port || p.Pid() == 0 || p.Pid() == pid {
					t.Errorf("start %d: port %d pid %d, want port %d and a new process", i, p.Port(), p.Pid(), port)
				}
				pid = p.Pid()
				if n := count(t, db); n != 1 {
					t.Errorf("start %d: %d rows, want 1", i, n)
				}
			}
			if err := p.Start(context.Background()); err == nil {
				t.Error("Start on a running server succeeded")
			}
		})
	}
}

// TestPrivateStandbyPromote makes a synchronous standby of a private
// PostgreSQL server, kills the primary (immediate shutdown) and promotes
// the standby: every commit the primary acknowledged is there, and the
// promoted standby accepts writes. A multi-host DSN then finds it.
func TestPrivateStandbyPromote(t *testing.T) {
	primary := startPrivate(t, Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pdb := openDB(t, "pgx", primary.DSN)
	mustExec(t, pdb, "CREATE TABLE t (id INT PRIMARY KEY)")
	standby, err := primary.StartStandby(ctx)
	if err != nil {
		t.Fatalf("StartStandby: %v", err)
	}
	t.Cleanup(func() {
		if err := standby.Close(); err != nil {
			t.Errorf("close standby: %v", err)
		}
	})
	var state string
	if err := pdb.QueryRowContext(ctx, "SELECT sync_state FROM pg_stat_replication").Scan(&state); err != nil || state != "sync" {
		t.Fatalf("replication sync_state %q (%v), want sync", state, err)
	}
	for i := range 50 {
		if _, err := pdb.ExecContext(ctx, "INSERT INTO t VALUES ($1)", i); err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
	sdb := openDB(t, "pgx", standby.DSN)
	if _, err := sdb.ExecContext(ctx, "INSERT INTO t VALUES (100)"); err == nil {
		t.Error("a write on the standby succeeded")
	}
	if err := primary.Kill(); err != nil {
		t.Fatalf("kill primary: %v", err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatalf("promote: %v", err)
	}
	if err := standby.Promote(ctx); err == nil {
		t.Error("a second Promote succeeded")
	}
	if n := count(t, sdb); n != 50 {
		t.Errorf("promoted standby has %d rows, want the 50 the primary acknowledged", n)
	}
	multi := "postgres://postgres@127.0.0.1:" + strconv.Itoa(primary.Port()) + ",127.0.0.1:" + strconv.Itoa(standby.Port()) +
		"/test?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
	mdb := openDB(t, "pgx", multi)
	mustExec(t, mdb, "INSERT INTO t VALUES (100)")
	if n := count(t, sdb); n != 51 {
		t.Errorf("after a write through the multi-host DSN: %d rows, want 51", n)
	}
}

// TestPgBouncerStopStart restarts a private PgBouncer in front of a private
// PostgreSQL server: refused while stopped, on the same port afterwards,
// the server's data unchanged.
func TestPgBouncerStopStart(t *testing.T) {
	pg := startPrivate(t, Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := StartPgBouncer(ctx, pg)
	if err != nil {
		t.Fatalf("StartPgBouncer: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close PgBouncer: %v", err)
		}
	})
	if b.Port() == pg.Port() || b.Source != "private PgBouncer" {
		t.Errorf("PgBouncer port %d (server %d), Source %q", b.Port(), pg.Port(), b.Source)
	}
	db := openDB(t, "pgx", b.DSN+"&default_query_exec_mode=exec")
	mustExec(t, db, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)")
	port := b.Port()
	if err := b.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	refused(t, db)
	if err := b.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	if b.Port() != port {
		t.Errorf("port %d after Start, want %d", b.Port(), port)
	}
	if n := count(t, db); n != 1 {
		t.Errorf("%d rows through PgBouncer, want 1", n)
	}
	if _, err := b.StartStandby(ctx); err == nil {
		t.Error("StartStandby of a PgBouncer succeeded")
	}
}
