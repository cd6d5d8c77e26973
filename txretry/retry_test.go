package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

func TestRetriesDefaultClassUntilSuccess(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"40001", errSerialization},
		{"40P01", errDeadlock},
		{"mysql 1213", errMySQLDeadlock},
		{"wrapped 40001", fmtWrap(errSerialization)},
		{"joined 1213", errors.Join(io.EOF, errMySQLDeadlock)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnExec: failFirst(2, tc.err)})
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...)
			if err != nil {
				t.Fatalf("RunInTx: %v", err)
			}
			st := f.drv.Stats()
			if calls.Load() != 3 || st.Begins != 3 || st.Rollbacks != 2 || st.Commits != 1 {
				t.Fatalf("calls=%d begins=%d rollbacks=%d commits=%d, want 3 3 2 1", calls.Load(), st.Begins, st.Rollbacks, st.Commits)
			}
			// Full jitter with rnd 0.5 over 2 ms, 4 ms: 1 ms, 2 ms.
			if got, want := f.clock.Waits(), []time.Duration{time.Millisecond, 2 * time.Millisecond}; !equalDurations(got, want) {
				t.Fatalf("waits %v, want %v", got, want)
			}
		})
	}
}

func TestNonRetryableErrorsReturnedUnchangedAfterOneAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"unique violation", errUnique},
		{"lock not available", errLockNA},
		{"mysql lock wait timeout", errMySQLLockWait},
		{"domain error", errDomain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnExec: failFirst(1, tc.err)})
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			st := f.drv.Stats()
			if calls.Load() != 1 || st.Begins != 1 || st.Rollbacks != 1 || st.Commits != 0 {
				t.Fatalf("calls=%d begins=%d rollbacks=%d commits=%d, want 1 1 1 0", calls.Load(), st.Begins, st.Rollbacks, st.Commits)
			}
		})
	}
}

func TestFnErrorIsReturnedAsIs(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	err := txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { return errDomain }, f.opts()...)
	if err != errDomain {
		t.Fatalf("err = %#v, want the very value fn returned", err)
	}
}

func TestRetryableErrorAtCommitReRunsTheWholeTransaction(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnCommit: func(n int) error {
		if n == 1 {
			return errSerialization
		}
		return nil
	}})
	var calls atomic.Int32
	if err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 {
		t.Fatalf("fn ran %d times, want 2", calls.Load())
	}
	want := []string{"begin", "exec UPDATE t SET v = v + 1", "commit", "begin", "exec UPDATE t SET v = v + 1", "commit"}
	if got := f.drv.Log(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("log %q, want %q", got, want)
	}
}

func TestExhaustion(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(1000, errSerialization)})
	var calls atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts(txretry.WithMaxAttempts(4))...)
	if !errors.Is(err, txretry.ErrRetriesExhausted) {
		t.Fatalf("err = %v, want ErrRetriesExhausted", err)
	}
	var re *txretry.RetryError
	var pe *fakedb.SQLStateError
	if !errors.As(err, &re) || re.Attempts != 4 || re.Reason != "attempt limit" || !errors.As(err, &pe) || pe.Code != "40001" {
		t.Fatalf("err = %#v, want a RetryError of 4 attempts wrapping the 40001", err)
	}
	if calls.Load() != 4 || len(f.clock.Waits()) != 3 {
		t.Fatalf("fn ran %d times with %d waits, want 4 and 3", calls.Load(), len(f.clock.Waits()))
	}
}

func TestDefaultAttemptLimit(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(1000, errSerialization)})
	var calls atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...)
	if !errors.Is(err, txretry.ErrRetriesExhausted) || calls.Load() != txretry.DefaultMaxAttempts {
		t.Fatalf("err = %v after %d calls, want exhaustion after %d", err, calls.Load(), txretry.DefaultMaxAttempts)
	}
}

func TestAttemptTimeoutIsNotRetriedByDefault(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	var calls atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		calls.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}, f.opts(txretry.WithAttemptTimeout(time.Millisecond))...)
	if !errors.Is(err, txretry.ErrAttemptTimeout) || !errors.Is(err, context.DeadlineExceeded) || calls.Load() != 1 {
		t.Fatalf("err = %v after %d calls, want ErrAttemptTimeout after 1", err, calls.Load())
	}
	// Opting in retries it.
	calls.Store(0)
	err = txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		if calls.Add(1) == 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, f.opts(txretry.WithAttemptTimeout(50*time.Millisecond),
		txretry.WithRetryOn(func(err error) bool { return errors.Is(err, txretry.ErrAttemptTimeout) }))...)
	if err != nil || calls.Load() != 2 {
		t.Fatalf("err = %v after %d calls, want success after 2", err, calls.Load())
	}
}

func TestClassifierOptions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		opts      []txretry.Option
		wantCalls int32
	}{
		{"retry-on extends", errLockNA, []txretry.Option{txretry.WithRetryOn(pgerr.IsLockNotAvailable)}, 2},
		{"retry-on keeps default", errSerialization, []txretry.Option{txretry.WithRetryOn(pgerr.IsLockNotAvailable)}, 2},
		{"classifier replaces", errSerialization, []txretry.Option{txretry.WithClassifier(pgerr.IsDeadlock)}, 1},
		{"classifier then retry-on", errLockNA, []txretry.Option{txretry.WithClassifier(pgerr.IsDeadlock), txretry.WithRetryOn(pgerr.IsLockNotAvailable)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnExec: failFirst(1, tc.err)})
			var calls atomic.Int32
			_ = txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts(tc.opts...)...)
			if calls.Load() != tc.wantCalls {
				t.Fatalf("fn ran %d times, want %d", calls.Load(), tc.wantCalls)
			}
		})
	}
}

func TestAttemptNumberInFn(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(2, errSerialization)})
	var seen []int
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		seen = append(seen, txretry.Attempt(ctx))
		_, err := tx.ExecContext(ctx, "UPDATE")
		return err
	}, f.opts()...)
	if err != nil || len(seen) != 3 || seen[0] != 1 || seen[1] != 2 || seen[2] != 3 {
		t.Fatalf("err=%v attempts seen %v, want [1 2 3]", err, seen)
	}
	if txretry.Attempt(context.Background()) != 0 {
		t.Fatal("Attempt outside fn must be 0")
	}
}

func TestSharedOptionsAcrossConcurrentCalls(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
		if n%3 == 0 {
			return errSerialization
		}
		return nil
	}})
	f.clock.OnWait = nil // other calls' transactions are open while one waits
	opts := f.opts(txretry.WithMaxAttempts(20), txretry.WithBackoff(txretry.DefaultBackoff()))
	errs := make(chan error, 32)
	for range 32 {
		go func() {
			var calls atomic.Int32
			errs <- txretry.RunInTx(context.Background(), f.db, execFn(&calls), opts...)
		}()
	}
	for range 32 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
