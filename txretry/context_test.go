package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

func TestContextDoneBeforeFirstAttempt(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var calls atomic.Int32
	err := txretry.RunInTx(ctx, f.db, execFn(&calls), f.opts()...)
	if !errors.Is(err, context.Canceled) || calls.Load() != 0 || f.drv.Stats().Begins != 0 {
		t.Fatalf("err=%v calls=%d begins=%d, want context.Canceled and nothing run", err, calls.Load(), f.drv.Stats().Begins)
	}
}

func TestCancellationDuringWaitEndsAtOnce(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(1000, errSerialization)})
	f.clock.Block = true // the wait never ends by itself
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-f.clock.Blocking()
		cancel()
	}()
	var calls atomic.Int32
	err := txretry.RunInTx(ctx, f.db, execFn(&calls), f.opts()...)
	var pe *fakedb.SQLStateError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &pe) || errors.Is(err, txretry.ErrRetriesExhausted) {
		t.Fatalf("err = %v, want context.Canceled and the 40001, not exhaustion", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("fn ran %d times, want 1", calls.Load())
	}
}

func TestTimeBudgetStopsBeforeAnAttemptThatCannotFinish(t *testing.T) {
	var f *fixture
	f = newFixture(t, &fakedb.Driver{OnExec: func(context.Context, int, string, []driver.NamedValue) error {
		f.clock.Advance(40 * time.Millisecond) // each attempt takes 40 ms
		return errSerialization
	}})
	var calls atomic.Int32
	// 100 ms: attempt 1 ends at 40, wait 1 ms, attempt 2 ends at 81, wait
	// 2 ms would start attempt 3 at 83 and end at 123 > 100: stop after 2.
	err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts(txretry.WithTimeBudget(100*time.Millisecond))...)
	var re *txretry.RetryError
	if !errors.As(err, &re) || re.Reason != "time budget" || re.Attempts != 2 || !errors.Is(err, txretry.ErrRetriesExhausted) {
		t.Fatalf("err = %v, want exhaustion by time budget after 2 attempts", err)
	}
	if calls.Load() != 2 || len(f.clock.Waits()) != 1 {
		t.Fatalf("fn ran %d times with %d waits, want 2 and 1", calls.Load(), len(f.clock.Waits()))
	}
}

func TestContextDeadlineStopsBeforeAnAttemptThatCannotFinish(t *testing.T) {
	var f *fixture
	f = newFixture(t, &fakedb.Driver{OnExec: func(context.Context, int, string, []driver.NamedValue) error {
		f.clock.Advance(time.Hour) // the fake clock passes the real deadline
		return errSerialization
	}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var calls atomic.Int32
	err := txretry.RunInTx(ctx, f.db, execFn(&calls), f.opts()...)
	var re *txretry.RetryError
	if !errors.As(err, &re) || re.Reason != "deadline" || calls.Load() != 1 || len(f.clock.Waits()) != 0 {
		t.Fatalf("err = %v after %d calls and %d waits, want a deadline stop after 1 call, no wait", err, calls.Load(), len(f.clock.Waits()))
	}
}

func TestCommitRunsEvenIfCallerCancelsAfterFnReturned(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnCommit: func(int) error { return nil }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := txretry.RunInTx(ctx, f.db, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT"); err != nil {
			return err
		}
		cancel() // e.g. the HTTP client went away just as fn finished
		return nil
	}, f.opts()...)
	if err != nil || f.drv.Stats().Commits != 1 {
		t.Fatalf("err=%v commits=%d: COMMIT must not observe the caller's cancellation", err, f.drv.Stats().Commits)
	}
}

// A deadline that passes while BEGIN waits for a pooled connection is
// reported as the context's error (DeadlineExceeded), not context.Canceled.
func TestBeginReportsTheContextsOwnCause(t *testing.T) {
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	db.SetMaxOpenConns(1)
	busy, _ := db.Conn(context.Background())
	defer busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := txretry.RunInTx(ctx, db, func(context.Context, *sql.Tx) error { return nil }, txretry.WithoutContentionManager())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded (the caller's ctx.Err() is %v)", err, ctx.Err())
	}
}
