package txretrytest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/txretrytest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counted runs an empty fn on db with ctx and returns how many times fn
// ran and the call's error.
func counted(ctx context.Context, db *sql.DB, opts ...txretry.Option) (runs int, err error) {
	err = txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		runs++
		_, err := tx.ExecContext(ctx, "UPDATE t SET v = v + 1")
		return err
	}, append([]txretry.Option{txretry.WithoutContentionManager()}, opts...)...)
	return runs, err
}

func TestInjectConflictsLastsUntilTheTestEnds(t *testing.T) {
	drv := &fakedb.Driver{}
	db := drv.DB()
	defer db.Close()
	t.Run("injecting", func(t *testing.T) {
		txretrytest.InjectConflicts(t, 3)
		if runs, err := counted(context.Background(), db); err != nil || runs != 4 {
			t.Fatalf("err = %v, fn ran %d times; want nil, 4", err, runs)
		}
		if s := drv.Stats(); s.Rollbacks != 3 || s.Commits != 1 {
			t.Errorf("%d rollbacks, %d commits; want 3 and 1", s.Rollbacks, s.Commits)
		}
		// Every call, not only the first.
		if runs, err := counted(context.Background(), db); err != nil || runs != 4 {
			t.Fatalf("second call: err = %v, fn ran %d times; want nil, 4", err, runs)
		}
	})
	if runs, err := counted(context.Background(), db); err != nil || runs != 1 {
		t.Fatalf("after the test: err = %v, fn ran %d times; want nil, once", err, runs)
	}
}

// The injected error is handled as a real 40001: retried within the
// attempt limit, returned inside the RetryError, and left alone by a
// classifier that does not retry 40001.
func TestInjectedConflictIsARealOne(t *testing.T) {
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	txretrytest.InjectConflicts(t, 5)
	runs, err := counted(context.Background(), db, txretry.WithMaxAttempts(2))
	var re *txretry.RetryError
	if !errors.As(err, &re) || re.Attempts != 2 || runs != 2 || !pgerr.IsSerializationFailure(err) || !errors.Is(err, txretrytest.ErrInjected) {
		t.Fatalf("err = %v, fn ran %d times; want a RetryError after 2 attempts wrapping the injected 40001", err, runs)
	}
	if got, want := err.Error(), "txretry: stopped after 2 attempt(s) (attempt limit): SQLSTATE 40001 (inject.ConflictError)"; got != want {
		t.Errorf("err = %q, want %q", got, want)
	}
	runs, err = counted(context.Background(), db, txretry.WithClassifier(func(error) bool { return false }))
	if !pgerr.IsSerializationFailure(err) || runs != 1 {
		t.Fatalf("classifier retrying nothing: err = %v, fn ran %d times; want the 40001 after one run", err, runs)
	}
}

// An attempt whose fn fails counts as one of the n; fn's error is
// returned unchanged when it is not retryable.
func TestFailedAttemptCountsAsInjected(t *testing.T) {
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	errRetry := errors.New("retry me")
	txretrytest.InjectConflicts(t, 2)
	runs := 0
	err := txretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
		runs++
		if runs == 1 {
			return errRetry
		}
		return nil
	}, txretry.WithoutContentionManager(), txretry.WithRetryOn(func(err error) bool { return errors.Is(err, errRetry) }))
	if err != nil || runs != 3 {
		t.Fatalf("err = %v, fn ran %d times; want nil, 3 (its own failure, one injected conflict, the commit)", err, runs)
	}
}

func TestWithConflictsActsOnItsContext(t *testing.T) {
	db := (&fakedb.Driver{}).DB()
	t.Cleanup(func() { db.Close() }) // after the parallel subtests
	for _, tt := range []struct {
		name string
		ctx  context.Context
		want int
	}{
		{"two", txretrytest.WithConflicts(context.Background(), 2), 3},
		{"derived", context.WithValue(txretrytest.WithConflicts(context.Background(), 1), struct{}{}, 1), 2},
		{"zero", txretrytest.WithConflicts(context.Background(), 0), 1},
		{"negative", txretrytest.WithConflicts(context.Background(), -3), 1},
		{"nil", txretrytest.WithConflicts(nil, 1), 2}, //nolint:staticcheck // a nil ctx is accepted
		{"another context", context.Background(), 1},
		{"with lost commits too", txretrytest.WithConflicts(txretrytest.WithLostCommits(context.Background(), true), 1), 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runs, err := counted(tt.ctx, db, txretry.WithVerify(func(context.Context) (bool, error) { return true, nil }))
			if err != nil || runs != tt.want {
				t.Fatalf("err = %v, fn ran %d times; want nil, %d", err, runs, tt.want)
			}
		})
	}
}

func TestInjectLostCommits(t *testing.T) {
	for _, committed := range []bool{true, false} {
		t.Run(fmt.Sprint("committed=", committed), func(t *testing.T) {
			drv := &fakedb.Driver{}
			db := drv.DB()
			defer db.Close()
			txretrytest.InjectLostCommits(t, committed)
			for call := range 2 { // every call's first COMMIT
				before := drv.Stats()
				runs, err := counted(context.Background(), db)
				if !errors.Is(err, txretry.ErrCommitUncertain) || !errors.Is(err, txretrytest.ErrInjected) || runs != 1 {
					t.Fatalf("call %d: err = %v, fn ran %d times; want ErrCommitUncertain after one run", call, err, runs)
				}
				s := drv.Stats()
				if commits := s.Commits - before.Commits; commits != int(b2i(committed)) || s.Rollbacks-before.Rollbacks != 1-commits {
					t.Errorf("call %d: %d commits, %d rollbacks; want the transaction committed: %v", call, commits, s.Rollbacks-before.Rollbacks, committed)
				}
			}
			var ue *txretry.CommitUncertainError
			_, err := counted(context.Background(), db)
			if !errors.As(err, &ue) || ue.Error() != "txretry: commit outcome unknown after 1 attempt(s): txretrytest: injected connection loss during COMMIT: read tcp: use of closed network connection; no verifier configured" {
				t.Errorf("err = %v", err)
			}
		})
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// fatalTB records Fatalf, which InjectConflicts calls on bad input.
type fatalTB struct {
	testing.TB
	fatal string
}

func (f *fatalTB) Helper()                           {}
func (f *fatalTB) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }

func TestInjectConflictsRejectsNegative(t *testing.T) {
	tb := &fatalTB{TB: t}
	txretrytest.InjectConflicts(tb, -1)
	if tb.fatal != "txretrytest.InjectConflicts: n = -1, want 0 or more" {
		t.Fatalf("Fatalf(%q), want the bad n named", tb.fatal)
	}
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	if runs, err := counted(context.Background(), db); err != nil || runs != 1 {
		t.Fatalf("err = %v, fn ran %d times; want nothing injected", err, runs)
	}
}

// The process-wide injections refuse parallel tests, as t.Setenv does.
func TestInjectRefusesParallelTests(t *testing.T) {
	t.Run("parallel", func(t *testing.T) {
		t.Parallel()
		defer func() {
			if recover() == nil {
				t.Error("InjectConflicts in a parallel test did not panic")
			}
		}()
		txretrytest.InjectConflicts(t, 1)
	})
}
