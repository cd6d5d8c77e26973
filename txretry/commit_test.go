package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// TestInterruptedCommitIsUncertain: the server codes that can arrive after
// the commit record was written (a cancelled statement, a shutdown, a crash
// restart) leave COMMIT uncertain, even with a classifier that would retry
// them elsewhere: fn is not run again.
func TestInterruptedCommitIsUncertain(t *testing.T) {
	for _, code := range []string{"57014", "57P01", "57P02", "57P03", "08000", "08003", "08007", "40003"} {
		t.Run(code, func(t *testing.T) {
			cerr := &fakedb.SQLStateError{Code: code, Message: "terminating connection"}
			f := newFixture(t, &fakedb.Driver{OnCommit: func(int) error { return cerr }})
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls),
				f.opts(txretry.WithRetryOn(func(error) bool { return true }))...)
			if !errors.Is(err, txretry.ErrCommitUncertain) || !errors.Is(err, cerr) {
				t.Fatalf("err = %v, want ErrCommitUncertain carrying SQLSTATE %s", err, code)
			}
			if calls.Load() != 1 {
				t.Fatalf("fn ran %d times, want 1", calls.Load())
			}
		})
	}
}

// TestMySQLCommitErrors: a MySQL/MariaDB error at COMMIT proves a rollback
// only where the server documents one (a deadlock or certification failure,
// Group Replication's rollback, a read-only server, TiDB's conflicts and
// schema change):
// those are not uncertain, and a retryable one runs fn again. A killed
// connection or query, a shutdown or a storage engine error during COMMIT
// can follow a COMMIT that was applied: uncertain, fn not run again.
func TestMySQLCommitErrors(t *testing.T) {
	for _, tc := range []struct {
		number    uint16
		uncertain bool
	}{
		{1213, false}, {3101, false}, {1205, false}, {1047, false}, {1290, false}, {1792, false}, {4031, false},
		{9007, false}, {8002, false}, {8005, false}, {8022, false}, {8028, false},
		{1053, true}, {1317, true}, {1927, true}, {1180, true}, {1105, true},
	} {
		t.Run(fmt.Sprint(tc.number), func(t *testing.T) {
			cerr := &mysql.MySQLError{Number: tc.number, Message: "at commit"}
			f := newFixture(t, &fakedb.Driver{OnCommit: func(n int) error {
				if n == 1 {
					return cerr
				}
				return nil
			}})
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls),
				f.opts(txretry.WithRetryOn(func(error) bool { return true }))...)
			if got := errors.Is(err, txretry.ErrCommitUncertain); got != tc.uncertain {
				t.Fatalf("err = %v, uncertain %v, want %v", err, got, tc.uncertain)
			}
			if want := map[bool]int32{true: 1, false: 2}[tc.uncertain]; calls.Load() != want {
				t.Fatalf("fn ran %d times, want %d", calls.Load(), want)
			}
		})
	}
}

// TestFnEndingTheTransactionIsNotUncertain: when fn committed or rolled back
// the transaction itself, RunInTx's own COMMIT fails with sql.ErrTxDone;
// that is fn's mistake, reported as ErrTxEndedByFn after one attempt, not
// an uncertain commit.
func TestFnEndingTheTransactionIsNotUncertain(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*sql.Tx) error
	}{
		{"commit", (*sql.Tx).Commit},
		{"rollback", (*sql.Tx).Rollback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{})
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
				calls.Add(1)
				return tc.end(tx)
			}, f.opts(txretry.WithVerify(func(context.Context) (bool, error) {
				t.Error("the verifier ran: a transaction ended by fn is not an uncertain commit")
				return false, nil
			}))...)
			if !errors.Is(err, txretry.ErrTxEndedByFn) || errors.Is(err, txretry.ErrCommitUncertain) || calls.Load() != 1 {
				t.Fatalf("err = %v after %d calls, want ErrTxEndedByFn (not uncertain) after 1", err, calls.Load())
			}
		})
	}
}

// TestNoServerTextInAnyError: every error that txretry builds describes
// server errors by code, whichever way the call ended: retries exhausted,
// an attempt timed out, a commit left uncertain, a verifier that failed.
func TestNoServerTextInAnyError(t *testing.T) {
	const secret = "alice@example.com"
	serverErr := func(code string) error {
		return &fakedb.SQLStateError{Code: code, Message: "Key (email)=(" + secret + ") already exists"}
	}
	for _, tc := range []struct {
		name     string
		drv      *fakedb.Driver
		fn       func(ctx context.Context, tx *sql.Tx) error
		opts     []txretry.Option
		wantCode string
	}{
		{"exhausted", &fakedb.Driver{OnExec: failFirst(1000, serverErr("40001"))}, nil,
			[]txretry.Option{txretry.WithMaxAttempts(2)}, "SQLSTATE 40001"},
		{"attempt timed out", &fakedb.Driver{}, func(ctx context.Context, _ *sql.Tx) error {
			<-ctx.Done()
			return serverErr("57014") // what a driver reports for the cancelled statement
		}, []txretry.Option{txretry.WithAttemptTimeout(time.Millisecond)}, "SQLSTATE 57014"},
		{"uncertain commit", &fakedb.Driver{OnCommit: func(int) error { return serverErr("57P01") }}, nil,
			nil, "SQLSTATE 57P01"},
		{"verifier failed", &fakedb.Driver{OnCommit: lostFirstCommit}, nil,
			[]txretry.Option{txretry.WithVerifyTimeout(50 * time.Millisecond),
				txretry.WithVerify(func(context.Context) (bool, error) { return false, serverErr("42P01") })}, "SQLSTATE 42P01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.drv)
			fn := tc.fn
			if fn == nil {
				var calls atomic.Int32
				fn = execFn(&calls)
			}
			err := txretry.RunInTx(context.Background(), f.db, fn, f.opts(tc.opts...)...)
			if err == nil {
				t.Fatal("RunInTx = nil, want an error")
			}
			msg := err.Error()
			if strings.Contains(msg, secret) || !strings.Contains(msg, tc.wantCode) {
				t.Fatalf("message %q: want %s and no server text", msg, tc.wantCode)
			}
			if d := txretry.Describe(err); strings.Contains(d, secret) {
				t.Fatalf("Describe = %q: want no server text", d)
			}
		})
	}
}

// TestBeginHonoursCancellationWhileWaitingForAConnection: the transaction
// is begun on a context without the caller's cancellation (so that COMMIT is
// not cut short), yet BEGIN itself, including the wait for a pooled
// connection, still ends with the caller's context.
func TestBeginHonoursCancellationWhileWaitingForAConnection(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	f.db.SetMaxOpenConns(1)
	busy, err := f.db.Conn(context.Background()) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	var calls atomic.Int32
	errc := make(chan error, 1)
	go func() { errc <- txretry.RunInTx(ctx, f.db, execFn(&calls), f.opts()...) }()
	select {
	case err = <-errc:
	case <-time.After(5 * time.Second):
		busy.Close()
		<-errc
		t.Fatal("RunInTx kept waiting for a connection after the caller cancelled")
	}
	busy.Close()
	if !errors.Is(err, context.Canceled) || calls.Load() != 0 {
		t.Fatalf("err = %v after %d calls of fn, want context.Canceled and none", err, calls.Load())
	}
}

// TestBeginEndedByCancellationIsRolledBack: a caller that gives up while a
// short BEGIN runs (one that ends before RunInTx starts following the
// caller's context) gets its context's error, fn is not called, and the
// transaction that began is rolled back.
func TestBeginEndedByCancellationIsRolledBack(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFixture(t, &fakedb.Driver{
		OnBegin: func(context.Context, int, driver.TxOptions) error {
			cancel() // the caller gives up; BEGIN itself succeeds
			return nil
		},
	})
	var calls atomic.Int32
	err := txretry.RunInTx(ctx, f.db, execFn(&calls), f.opts()...)
	if !errors.Is(err, context.Canceled) || calls.Load() != 0 {
		t.Fatalf("err = %v after %d calls of fn, want context.Canceled and none", err, calls.Load())
	}
	if st := f.drv.Stats(); st.ActiveTx != 0 || st.Rollbacks != 1 {
		t.Fatalf("%d transaction(s) open, %d rolled back; want 0 and 1", st.ActiveTx, st.Rollbacks)
	}
}

// TestSlowBeginStopsFollowingTheCaller: a BEGIN slow enough that RunInTx
// starts following the caller's context must stop following it when BEGIN
// ends. The caller cancelling afterwards must not reach the pooled context
// that later calls begin their transactions on.
func TestSlowBeginStopsFollowingTheCaller(t *testing.T) {
	var slow atomic.Bool
	f := newFixture(t, &fakedb.Driver{
		OnBegin: func(context.Context, int, driver.TxOptions) error {
			if slow.Load() {
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		},
	})
	var calls atomic.Int32
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		slow.Store(true)
		if err := txretry.RunInTx(ctx, f.db, execFn(&calls), f.opts()...); err != nil {
			t.Fatalf("a slow BEGIN: %v", err)
		}
		slow.Store(false)
		cancel()
		// A callback still registered on ctx would cancel the pooled
		// context on its own goroutine: give it the time to run.
		time.Sleep(5 * time.Millisecond)
		for range 20 {
			if err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...); err != nil {
				t.Fatalf("a call after an earlier caller cancelled: %v", err)
			}
		}
	}
}

// TestCancelledTransactionContextIsNotReused: the contexts transactions are
// begun on are pooled, and one that was cancelled (a COMMIT that outlived
// WithCommitTimeout, a BEGIN the caller gave up on) must never serve another
// call: every later BEGIN would fail at once.
func TestCancelledTransactionContextIsNotReused(t *testing.T) {
	var slow atomic.Bool
	f := newFixture(t, &fakedb.Driver{
		OnCommit: func(int) error {
			if slow.Load() {
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		},
		OnBegin: func(ctx context.Context, _ int, _ driver.TxOptions) error {
			if slow.Load() {
				<-ctx.Done() // BEGIN hangs until the caller gives up
				return ctx.Err()
			}
			return nil
		},
	})
	var calls atomic.Int32
	for range 5 {
		// COMMIT outlives its timeout: the transaction's context is
		// cancelled under it.
		slow.Store(false)
		_ = txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
			slow.Store(true)
			return nil
		}, f.opts(txretry.WithCommitTimeout(time.Millisecond))...)
		// BEGIN abandoned by the caller.
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		if err := txretry.RunInTx(ctx, f.db, execFn(&calls), f.opts()...); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("abandoned BEGIN: err = %v, want context.DeadlineExceeded", err)
		}
		cancel()
		slow.Store(false)
		for range 20 {
			if err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...); err != nil {
				t.Fatalf("a call after a cancelled transaction context: %v", err)
			}
		}
	}
}

func TestUncertainCommitIsNeverRetriedBlindly(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"unexpected EOF", io.ErrUnexpectedEOF},
		{"invalid connection", errors.New("invalid connection")},
		{"context canceled during commit", context.Canceled},
		{"deadline during commit", context.DeadlineExceeded},
		{"40003 statement completion unknown", &fakedb.SQLStateError{Code: "40003"}},
		{"08007 transaction resolution unknown", &fakedb.SQLStateError{Code: "08007"}},
		{"08006 connection failure", &fakedb.SQLStateError{Code: "08006"}},
		{"57P01 admin shutdown", &fakedb.SQLStateError{Code: "57P01"}},
		{"safe-to-retry false", safeErr{false}},
		// A driver not known to send COMMIT only after such a check (lib/pq
		// returns it for EOF in COMMIT's reply): see sqlcommit.go.
		{"driver.ErrBadConn from an unknown driver", driver.ErrBadConn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnCommit: func(int) error { return tc.err }})
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...)
			var ue *txretry.CommitUncertainError
			if !errors.Is(err, txretry.ErrCommitUncertain) || !errors.Is(err, tc.err) || !errors.As(err, &ue) || ue.Attempts != 1 {
				t.Fatalf("err = %v, want ErrCommitUncertain carrying %v", err, tc.err)
			}
			if calls.Load() != 1 || f.drv.Stats().Begins != 1 {
				t.Fatalf("fn ran %d times, want 1", calls.Load())
			}
		})
	}
}

type safeErr struct{ safe bool }

func (e safeErr) Error() string { return "conn error" }

func (e safeErr) SafeToRetry() bool { return e.safe }

func TestCommitErrorsThatProveNoCommit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		retried   bool
		wantCalls int32
	}{
		{"40001 at commit", errSerialization, true, 2},
		{"1213 at commit", errMySQLDeadlock, true, 2},
		{"deferred unique violation", errUnique, false, 1},
		{"pgconn safe to retry", safeErr{true}, false, 1},
		{"pgx commit resulted in rollback", errors.New("commit unexpectedly resulted in rollback"), false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnCommit: failFirstCommit(tc.err)})
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...)
			if errors.Is(err, txretry.ErrCommitUncertain) {
				t.Fatalf("err = %v: a proven rollback is not uncertain", err)
			}
			if tc.retried != (err == nil) || calls.Load() != tc.wantCalls {
				t.Fatalf("err=%v calls=%d, want retried=%v calls=%d", err, calls.Load(), tc.retried, tc.wantCalls)
			}
		})
	}
}
