package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/pgerr"
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
	f.clock.block = true // the wait never ends by itself
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-f.clock.timerOut
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

func TestPanicRollsBackAndRepanicsWithOriginalValue(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	type boom struct{ n int }
	defer func() {
		p := recover()
		if b, ok := p.(boom); !ok || b.n != 42 {
			t.Fatalf("recovered %#v, want boom{42}", p)
		}
		st := f.drv.Stats()
		if st.Rollbacks != 1 || st.Commits != 0 || st.ActiveTx != 0 {
			t.Fatalf("rollbacks=%d commits=%d active=%d, want 1 0 0", st.Rollbacks, st.Commits, st.ActiveTx)
		}
		if f.db.Stats().InUse != 0 {
			t.Fatal("connection not returned to the pool")
		}
	}()
	_ = txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		panic(boom{42})
	}, f.opts()...)
	t.Fatal("RunInTx returned after a panic")
}

func TestNestedCallJoinsOuterTransaction(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	var innerTx, outerTx *sql.Tx
	var innerAttempt int
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		outerTx = tx
		return txretry.RunInTx(ctx, f.db, func(ctx context.Context, tx *sql.Tx) error {
			innerTx, innerAttempt = tx, txretry.Attempt(ctx)
			return nil
		}, f.opts()...)
	}, f.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	if innerTx != outerTx || innerAttempt != 1 || f.drv.Stats().Begins != 1 || f.drv.Stats().Commits != 1 {
		t.Fatalf("inner tx %p outer %p attempt %d begins %d commits %d: the inner call must join", innerTx, outerTx, innerAttempt, f.drv.Stats().Begins, f.drv.Stats().Commits)
	}
}

func TestNestedCallLeavesRetryingToTheOutermost(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	var inner, outer atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		outer.Add(1)
		err := txretry.RunInTx(ctx, f.db, func(ctx context.Context, tx *sql.Tx) error {
			if inner.Add(1) < 3 {
				return errSerialization
			}
			return nil
		}, f.opts()...)
		return err
	}, f.opts()...)
	if err != nil || inner.Load() != 3 || outer.Load() != 3 || f.drv.Stats().Begins != 3 {
		t.Fatalf("err=%v inner=%d outer=%d begins=%d, want nil 3 3 3", err, inner.Load(), outer.Load(), f.drv.Stats().Begins)
	}
}

func TestNestedCallOnAnotherDBIsIndependent(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	g := newFixture(t, &fakedb.Driver{})
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		return txretry.RunInTx(ctx, g.db, func(ctx context.Context, tx2 *sql.Tx) error {
			if tx2 == tx {
				t.Error("joined a transaction of another db")
			}
			return nil
		}, g.opts()...)
	}, f.opts()...)
	if err != nil || f.drv.Stats().Commits != 1 || g.drv.Stats().Commits != 1 {
		t.Fatalf("err=%v commits %d/%d, want two independent commits", err, f.drv.Stats().Commits, g.drv.Stats().Commits)
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

func (e safeErr) Error() string     { return "conn error" }
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
		{"driver.ErrBadConn", driver.ErrBadConn, false, 1},
		{"pgconn safe to retry", safeErr{true}, false, 1},
		{"pgx commit resulted in rollback", errors.New("commit unexpectedly resulted in rollback"), false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnCommit: func(n int) error {
				if n == 1 {
					return tc.err
				}
				return nil
			}})
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

func TestFnEndingTheTransactionItselfIsAnError(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		return tx.Commit()
	}, f.opts()...)
	if !errors.Is(err, txretry.ErrTxEndedByFn) || !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("err = %v, want ErrTxEndedByFn", err)
	}
}

func TestVerifyCallback(t *testing.T) {
	lost := errors.New("invalid connection")
	for _, tc := range []struct {
		name       string
		answers    []verifyAnswer
		wantErr    error // nil: success
		wantCalls  int32
		wantVerify int32
	}{
		{"committed", []verifyAnswer{{committed: true}}, nil, 1, 1},
		{"not committed re-runs", []verifyAnswer{{}}, nil, 2, 1},
		{"error then committed", []verifyAnswer{{err: io.EOF}, {err: io.EOF}, {committed: true}}, nil, 1, 3},
		{"always failing", []verifyAnswer{{err: io.EOF}}, txretry.ErrCommitUncertain, 1, -1},
		{"panicking", []verifyAnswer{{panics: true}}, txretry.ErrCommitUncertain, 1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnCommit: func(n int) error {
				if n == 1 {
					return lost
				}
				return nil
			}})
			var verifies atomic.Int32
			verify := func(ctx context.Context) (bool, error) {
				i := int(verifies.Add(1)) - 1
				a := tc.answers[min(i, len(tc.answers)-1)]
				if a.panics {
					panic("verifier bug")
				}
				return a.committed, a.err
			}
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls),
				f.opts(txretry.WithVerify(verify), txretry.WithVerifyTimeout(time.Second))...)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if calls.Load() != tc.wantCalls || (tc.wantVerify >= 0 && verifies.Load() != tc.wantVerify) {
				t.Fatalf("fn ran %d times, verify %d times; want %d, %d", calls.Load(), verifies.Load(), tc.wantCalls, tc.wantVerify)
			}
			var ue *txretry.CommitUncertainError
			if tc.wantErr != nil && (!errors.As(err, &ue) || ue.Verifier != "callback" || ue.VerifyErr == nil || !errors.Is(err, lost)) {
				t.Fatalf("err = %#v, want the commit error and the verifier's error", err)
			}
		})
	}
}

type verifyAnswer struct {
	committed bool
	err       error
	panics    bool
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

func TestTransactionOptionsReachTheDriver(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	err := txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { return nil },
		f.opts(txretry.WithIsolation(sql.LevelSerializable), txretry.WithReadOnly())...)
	got := f.drv.Stats().LastTxOptions
	if err != nil || got.Isolation != driver.IsolationLevel(sql.LevelSerializable) || !got.ReadOnly {
		t.Fatalf("err=%v options %+v, want serializable read-only", err, got)
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
	f.clock.onWait = nil // other calls' transactions are open while one waits
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

func TestVerifierBookkeepingIgnoresCancellationAfterFnReturned(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := txretry.RunInTx(ctx, f.db, func(ctx context.Context, tx *sql.Tx) error {
		cancel() // the caller goes away as fn returns
		return nil
	}, f.opts(txretry.WithCommitMarker("txretry_markers"))...)
	if err != nil || f.drv.Stats().Commits != 1 {
		t.Fatalf("err=%v commits=%d: the marker insert and COMMIT must not observe the cancellation", err, f.drv.Stats().Commits)
	}
}
