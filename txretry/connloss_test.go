package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

var (
	errRefused  = &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "connect: connection refused"}}
	errReset    = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	errShutdown = &fakedb.SQLStateError{Code: "57P01", Message: "terminating connection due to administrator command"}
	errStarting = &fakedb.SQLStateError{Code: "57P03", Message: "the database system is starting up"}
	errKilled   = &mysql.MySQLError{Number: 1927, Message: "Connection was killed"}
	// errIdle is MySQL 9.7's answer to the first command of a session it
	// closed after wait_timeout, COMMIT included.
	errIdle = &mysql.MySQLError{Number: 4031, SQLState: [5]byte{'H', 'Y', '0', '0', '0'},
		Message: "The client was disconnected by the server because of inactivity. See wait_timeout and interactive_timeout for configuring this behavior."}
)

// failConnects returns a connect hook refusing the first n connections.
func failConnects(n int) func(int) error {
	return func(i int) error {
		if i <= n {
			return errRefused
		}
		return nil
	}
}

// TestConnectionLossIsReturnedAtOnceByDefault: without
// WithRetryOnConnectionLoss a refused connection, a connection broken
// under fn and a server shutting down are returned as they are, after one
// attempt.
func TestConnectionLossIsReturnedAtOnceByDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		drv  *fakedb.Driver
		want error
	}{
		{"refused at BEGIN", &fakedb.Driver{OnConnect: failConnects(1)}, errRefused},
		{"reset under fn", &fakedb.Driver{OnExec: failFirst(1, errReset)}, syscall.ECONNRESET},
		{"57P01 under fn", &fakedb.Driver{OnExec: failFirst(1, errShutdown)}, errShutdown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.drv)
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...)
			var re *txretry.RetryError
			if !errors.Is(err, tc.want) || errors.As(err, &re) {
				t.Fatalf("err = %v, want %v as it is", err, tc.want)
			}
			if calls.Load() > 1 || len(f.clock.Waits()) != 0 {
				t.Fatalf("fn ran %d times after %v waits, want one attempt", calls.Load(), f.clock.Waits())
			}
		})
	}
}

// errPQDesync is lib/pq's error for the FATAL a server shutting down sends
// where a ReadyForQuery was due.
var errPQDesync = errors.New("pq: unexpected message 'E'; expected ReadyForQuery")

// TestConnectionLossBeforeCommitReRunsTheTransaction: with the option, a
// connection that could not be made or broke before COMMIT re-runs the
// whole transaction, waiting full jitter over 50 ms doubling (rnd 0.5:
// 25 ms, 50 ms, 100 ms).
func TestConnectionLossBeforeCommitReRunsTheTransaction(t *testing.T) {
	for _, tc := range []struct {
		name      string
		drv       *fakedb.Driver
		wantCalls int32
	}{
		{"refused at BEGIN", &fakedb.Driver{OnConnect: failConnects(3)}, 1},
		{"reset under fn", &fakedb.Driver{OnExec: failFirst(3, errReset)}, 4},
		{"EOF under fn", &fakedb.Driver{OnExec: failFirst(3, io.ErrUnexpectedEOF)}, 4},
		{"bad connection under fn", &fakedb.Driver{OnExec: failFirst(3, driver.ErrBadConn)}, 4},
		{"57P01 under fn", &fakedb.Driver{OnExec: failFirst(3, errShutdown)}, 4},
		{"57P03 at BEGIN", &fakedb.Driver{OnBegin: failBegins(3, errStarting)}, 1},
		{"MariaDB 1927 under fn", &fakedb.Driver{OnExec: failFirst(3, errKilled)}, 4},
		{"MySQL 4031 under fn", &fakedb.Driver{OnExec: failFirst(3, errIdle)}, 4},
		{"go-sql-driver invalid connection", &fakedb.Driver{OnExec: failFirst(3, mysql.ErrInvalidConn)}, 4},
		{"pgconn's conn closed", &fakedb.Driver{OnExec: failFirst(3, fmt.Errorf("failed to deallocate cached statement(s): %w", errors.New("conn closed")))}, 4},
		{"lib/pq's unexpected message under fn", &fakedb.Driver{OnExec: failFirst(3, errPQDesync)}, 4},
		{"lib/pq's unexpected message at BEGIN", &fakedb.Driver{OnBegin: failBegins(3, errPQDesync)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.drv)
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts(txretry.WithRetryOnConnectionLoss())...)
			if err != nil {
				t.Fatalf("RunInTx: %v", err)
			}
			if st := f.drv.Stats(); calls.Load() != tc.wantCalls || st.Commits != 1 {
				t.Fatalf("fn ran %d times, %d commits; want %d, 1", calls.Load(), st.Commits, tc.wantCalls)
			}
			want := []time.Duration{25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}
			if got := f.clock.Waits(); !equalDurations(got, want) {
				t.Fatalf("waits %v, want %v", got, want)
			}
		})
	}
}

// TestConnectionLossDuringCommitIsNeverRetriedBlindly: a COMMIT whose
// connection broke in flight stays uncertain with the option, and so does a
// driver.ErrBadConn from a driver not known to return it only before
// sending COMMIT (lib/pq returns it after); one whose error proves nothing
// was sent (pgconn's SafeToRetry) or done (MySQL's 4031) is re-run.
func TestConnectionLossDuringCommitIsNeverRetriedBlindly(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		retried bool
	}{
		{"lost in flight", io.ErrUnexpectedEOF, false},
		{"driver.ErrBadConn of an unknown driver", driver.ErrBadConn, false},
		{"wrapped driver.ErrBadConn of an unknown driver", fmt.Errorf("commit: %w", driver.ErrBadConn), false},
		{"lib/pq's unexpected message", errPQDesync, false},
		{"safe to retry", safeErr{true}, true},
		{"MySQL 4031: closed idle before COMMIT was read", errIdle, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnCommit: failFirstCommit(tc.err)})
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts(txretry.WithRetryOnConnectionLoss())...)
			if tc.retried {
				if err != nil || calls.Load() != 2 {
					t.Fatalf("err = %v after %d runs of fn, want nil after 2", err, calls.Load())
				}
				return
			}
			if !errors.Is(err, txretry.ErrCommitUncertain) || !errors.Is(err, tc.err) || calls.Load() != 1 {
				t.Fatalf("err = %v after %d runs of fn, want ErrCommitUncertain after 1", err, calls.Load())
			}
		})
	}
}

// TestConnectionLossRetriesStayWithinTheLimits: a server that never comes
// back exhausts the attempt limit, the time budget and the retry budget,
// each with a *RetryError holding the last connection error; a
// cancellation ends the call as without the option.
func TestConnectionLossRetriesStayWithinTheLimits(t *testing.T) {
	down := func() *fakedb.Driver { return &fakedb.Driver{OnConnect: failConnects(1 << 30)} }
	budget, err := txretry.NewRetryBudget(0.1, 0, nil) // no retry for a single call
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		opt    txretry.Option
		reason string
	}{
		{"attempt limit", txretry.WithMaxAttempts(4), "attempt limit"},
		{"time budget", txretry.WithTimeBudget(time.Second), "time budget"},
		{"retry budget", txretry.WithRetryBudget(budget), "retry budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, down())
			opts := []txretry.Option{txretry.WithRetryOnConnectionLoss(), tc.opt}
			err := txretry.RunInTx(context.Background(), f.db, execFn(new(atomic.Int32)), f.opts(opts...)...)
			var re *txretry.RetryError
			if !errors.As(err, &re) || re.Reason != tc.reason || !errors.Is(err, txretry.ErrRetriesExhausted) || !errors.Is(re.Err, errRefused) {
				t.Fatalf("err = %v, want a RetryError (%s) holding the refused connection", err, tc.reason)
			}
		})
	}

	t.Run("cancelled", func(t *testing.T) {
		f := newFixture(t, &fakedb.Driver{})
		ctx, cancel := context.WithCancel(context.Background())
		var calls atomic.Int32
		err := txretry.RunInTx(ctx, f.db, func(context.Context, *sql.Tx) error {
			calls.Add(1)
			cancel() // the caller gives up; the driver then reports a broken connection
			return driver.ErrBadConn
		}, f.opts(txretry.WithRetryOnConnectionLoss())...)
		if !errors.Is(err, driver.ErrBadConn) || calls.Load() != 1 {
			t.Fatalf("err = %v after %d runs of fn, want driver.ErrBadConn after 1", err, calls.Load())
		}
	})
}

// TestConnectionLossIsItsOwnClass: observers see a connection loss as
// ConnectionLost, a conflict as Retryable; a conflict after connection
// losses waits the normal backoff again (rnd 0.5 over 2 ms doubling: the
// third retry waits 4 ms).
func TestConnectionLossIsItsOwnClass(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
		switch n {
		case 1, 2:
			return errReset
		case 3:
			return errSerialization
		}
		return nil
	}})
	var classes []txretry.Class // the observer runs on the caller's goroutine
	obs := txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
		if e.Kind == txretry.AttemptFailed {
			classes = append(classes, e.Class)
		}
	})
	err := txretry.RunInTx(context.Background(), f.db, execFn(new(atomic.Int32)),
		f.opts(txretry.WithRetryOnConnectionLoss(), txretry.WithObserver(obs))...)
	if err != nil {
		t.Fatal(err)
	}
	if want := []txretry.Class{txretry.ConnectionLost, txretry.ConnectionLost, txretry.Retryable}; len(classes) != 3 ||
		classes[0] != want[0] || classes[1] != want[1] || classes[2] != want[2] {
		t.Fatalf("classes %v, want %v", classes, want)
	}
	if got, want := f.clock.Waits(), []time.Duration{25 * time.Millisecond, 50 * time.Millisecond, 4 * time.Millisecond}; !equalDurations(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	if got := txretry.ConnectionLost.String(); got != "connection_lost" {
		t.Fatalf("ConnectionLost.String() = %q", got)
	}
}

// TestVerifierWaitsOutARestart: after a lost COMMIT the commit marker's
// probe finds the server refusing connections, as during a restart; it
// tries again with the connection-loss backoff (rnd 0.5: 25 ms, 50 ms,
// 100 ms) within WithVerifyTimeout, and then answers.
func TestVerifierWaitsOutARestart(t *testing.T) {
	var inserts atomic.Int32
	f := newFixture(t, &fakedb.Driver{
		OnCommit: lostFirstCommit,
		OnBegin: func(_ context.Context, n int, _ driver.TxOptions) error {
			if n >= 2 && n <= 4 { // the probe's first three BEGINs
				return errRefused
			}
			return nil
		},
		OnExec: func(_ context.Context, _ int, query string, _ []driver.NamedValue) error {
			if strings.HasPrefix(query, "INSERT INTO markers ") && inserts.Add(1) == 2 {
				return errUnique // the probe repeats the committed token
			}
			return nil
		},
	})
	var calls atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts(txretry.WithCommitMarker("markers"))...)
	if err != nil || calls.Load() != 1 {
		t.Fatalf("err = %v after %d runs of fn, want nil after 1 (verified committed)", err, calls.Load())
	}
	want := []time.Duration{25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond}
	if got := f.clock.Waits(); !equalDurations(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
}

// TestConnectionLossOnASingleConnectionIsReturnedAtOnce: on a *sql.Conn
// (a handle of one connection, AdapterSingleConn) a connection that broke
// does not come back, so WithRetryOnConnectionLoss does not retry it: the
// call returns the connection error after one attempt, without waiting, as
// without the option.
func TestConnectionLossOnASingleConnectionIsReturnedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		drv  *fakedb.Driver
		want error
	}{
		{"reset under fn", &fakedb.Driver{OnExec: failFirst(1<<30, errReset)}, syscall.ECONNRESET},
		{"57P01 at BEGIN", &fakedb.Driver{OnBegin: func(context.Context, int, driver.TxOptions) error { return errShutdown }}, errShutdown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.drv)
			conn, err := f.db.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var attempts int
			obs := txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
				if e.Kind == txretry.AttemptStarted {
					attempts++
				}
			})
			err = txretry.RunInTx(context.Background(), conn, execFn(new(atomic.Int32)),
				f.opts(txretry.WithRetryOnConnectionLoss(), txretry.WithObserver(obs))...)
			var re *txretry.RetryError
			if !errors.Is(err, tc.want) || errors.As(err, &re) {
				t.Fatalf("err = %v, want %v as it is", err, tc.want)
			}
			if attempts != 1 || len(f.clock.Waits()) != 0 {
				t.Fatalf("%d attempts after waits of %v, want one attempt and no wait", attempts, f.clock.Waits())
			}
		})
	}
}
