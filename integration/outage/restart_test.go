//go:build unix

package outage

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/lib/pq" // database/sql driver "postgres"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
)

// survivingOpts are the options of the loads that must survive an outage.
func survivingOpts() []txretry.Option {
	return []txretry.Option{txretry.WithIsolation(sql.LevelSerializable),
		txretry.WithCommitMarker(markerTable), txretry.WithRetryOnConnectionLoss()}
}

// survive runs the load through p across outage with
// WithRetryOnConnectionLoss and the commit marker, and requires every call
// to succeed; the ledger is read through dsn afterwards.
func survive(t *testing.T, p *path, e dbserver.Engine, dsn string, outage func() window) {
	t.Helper()
	rs, w := load(t, p, outage, survivingOpts()...)
	s := measure(rs, w)
	t.Logf("%s with WithRetryOnConnectionLoss: %v", p.name, s)
	checkLedger(t, openDB(t, e, dsn), rs)
	shown := 0
	for _, r := range rs {
		if r.err != nil && shown < 5 {
			shown++
			t.Errorf("call %d failed after %d attempts: %s", r.id, r.obs.attempts, txretry.Describe(r.err))
		}
	}
	if s.failed > 0 {
		t.Errorf("%d of %d calls failed across the outage, want 0", s.failed, s.calls)
	}
	if s.lostDuring == 0 {
		t.Errorf("no attempt met the outage: the test proved nothing")
	}
}

// fail runs the load through p across outage without
// WithRetryOnConnectionLoss (the control): some calls must fail with a
// connection error, each at once, never retried after it. A call may also
// end on a conflict that its deadline left no time to retry: ten accounts
// under 16 workers make lock chains, and a loaded machine once stretched
// four first attempts past half the 5 s deadline before the outage.
func fail(t *testing.T, p *path, e dbserver.Engine, dsn string, outage func() window) {
	t.Helper()
	rs, w := load(t, p, outage, txretry.WithIsolation(sql.LevelSerializable), txretry.WithCommitMarker(markerTable))
	s := measure(rs, w)
	connFailures, afterUp, outOfTime := 0, 0, 0
	for _, r := range rs {
		if r.err == nil || errors.Is(r.err, txretry.ErrCommitUncertain) {
			continue
		}
		r.obs.mu.Lock()
		attempts, retried, lost := r.obs.attempts, r.obs.conflicts+r.obs.notCommitted, len(r.obs.lost)
		r.obs.mu.Unlock()
		var re *txretry.RetryError
		switch {
		case errors.As(r.err, &re) && re.Reason == "deadline" && (pgerr.IsRetryable(re.Err) || mysqlerr.IsRetryable(re.Err)) &&
			attempts == retried+1 && lost == 0:
			outOfTime++
		case !connectionError(r.err):
			t.Errorf("call %d: %s; want a connection error", r.id, txretry.Describe(r.err))
		case errors.Is(r.err, txretry.ErrRetriesExhausted), attempts != retried+1, lost > 0:
			// Conflicts and COMMITs the marker found not committed are
			// retried; nothing else is.
			t.Errorf("call %d: %s after %d attempts (%d conflicts or COMMITs verified not committed, %d classified ConnectionLost): retried after a connection loss without the option",
				r.id, txretry.Describe(r.err), attempts, retried, lost)
		default:
			connFailures++
			if r.start.After(w.up) {
				afterUp++
			}
		}
	}
	t.Logf("%s without the option: %v; %d calls failed with a connection error, each after one attempt with it (%d of them started after the server was back); %d ran out of time after a conflict",
		p.name, s, connFailures, afterUp, outOfTime)
	if connFailures == 0 {
		t.Error("no call failed with a connection error without WithRetryOnConnectionLoss")
	}
	checkLedger(t, openDB(t, e, dsn), rs)
}

// connectionError reports an error of a connection that broke or could
// not be made.
func connectionError(err error) bool {
	var ne net.Error
	// lib/pq reports the shutdown's ErrorResponse that arrives while it
	// waits for ReadyForQuery as a protocol error of its own.
	pqShutdown := err != nil && strings.Contains(err.Error(), "pq: unexpected message 'E'")
	return pqShutdown || pgerr.IsConnectionLoss(err) || mysqlerr.IsConnectionLoss(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, driver.ErrBadConn) || errors.As(err, &ne) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// restartTest runs, on a server srv restarted under the load, a load with
// the option (every call succeeds) and the control without it. open
// returns the path under test to dsn, a fresh pool for each load; check is
// the DSN the ledger is read through.
func restartTest(t *testing.T, srv *dbserver.Private, e dbserver.Engine, dsn, check string, open func(t *testing.T) *path) {
	t.Run("retry-on-connection-loss", func(t *testing.T) {
		createSchema(t, openDB(t, e, check), e)
		survive(t, open(t), e, check, restart(t, srv))
	})
	t.Run("control", func(t *testing.T) {
		createSchema(t, openDB(t, e, check), e)
		fail(t, open(t), e, check, restart(t, srv))
	})
}

// pgDSN returns the DSN of a private PostgreSQL server for the loads.
func pgDSN(srv *dbserver.Private) string { return srv.DSN + "&connect_timeout=2" }

// TestRestartPgxPool restarts PostgreSQL (fast shutdown, a second's pause,
// start on the same port) under 16 workers running SERIALIZABLE transfers
// through pgxpool and pgxretry, each call with a 5 s deadline. With
// WithRetryOnConnectionLoss and the commit marker no call fails; without
// the option calls fail with connection errors, each after one attempt.
// The ledger holds every call that succeeded, once.
func TestRestartPgxPool(t *testing.T) {
	srv := private(t, dbserver.Postgres)
	dsn := pgDSN(srv)
	restartTest(t, srv, dbserver.Postgres, dsn, dsn, func(t *testing.T) *path { return pgxPool(t, dsn) })
}

// TestRestartPgxStdlib is TestRestartPgxPool through database/sql with
// pgx's stdlib driver.
func TestRestartPgxStdlib(t *testing.T) {
	srv := private(t, dbserver.Postgres)
	dsn := pgDSN(srv)
	restartTest(t, srv, dbserver.Postgres, dsn, dsn, func(t *testing.T) *path {
		return sqlDB(t, "pgx stdlib", dbserver.Postgres, dsn)
	})
}

// TestRestartPQ is TestRestartPgxPool through database/sql with lib/pq,
// which reports a connection that the shutdown ended (57P01, EOF) as
// driver.ErrBadConn, in COMMIT too: such a COMMIT is uncertain, never
// retried blindly, and the commit marker settles it.
func TestRestartPQ(t *testing.T) {
	srv := private(t, dbserver.Postgres)
	dsn := pgDSN(srv)
	restartTest(t, srv, dbserver.Postgres, dsn, dsn, func(t *testing.T) *path {
		db, err := sql.Open("postgres", dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return sqlPath("lib/pq", dbserver.Postgres, db)
	})
}

// TestRestartMariaDB is TestRestartPgxPool on MariaDB (or MySQL) through
// go-sql-driver/mysql, restarted with a normal shutdown (SIGTERM).
func TestRestartMariaDB(t *testing.T) {
	srv := private(t, dbserver.MySQL)
	// readTimeout bounds a COMMIT, which go-sql-driver runs without the
	// context.
	dsn := srv.DSN + "?timeout=2s&readTimeout=10s&writeTimeout=10s"
	restartTest(t, srv, dbserver.MySQL, dsn, dsn, func(t *testing.T) *path {
		return sqlDB(t, "go-sql-driver", dbserver.MySQL, dsn)
	})
}

// TestRestartPgBouncer restarts a PgBouncer in transaction pooling mode
// (immediate shutdown: every client disconnected, a second's pause, start
// on the same port) in front of a PostgreSQL server that stays up, under
// the load of TestRestartPgxPool through pgxpool with
// default_query_exec_mode=exec. Both run privately for the test.
func TestRestartPgBouncer(t *testing.T) {
	pg := private(t, dbserver.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bouncer, err := dbserver.StartPgBouncer(ctx, pg)
	if err != nil {
		unavailable(t, err)
	}
	closeAtEnd(t, bouncer)
	dsn := bouncer.DSN + "&connect_timeout=2&default_query_exec_mode=exec"
	restartTest(t, bouncer, dbserver.Postgres, dsn, pgDSN(pg), func(t *testing.T) *path { return pgxPool(t, dsn) })
}
