package txretry_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

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

// TestNestedCallChecksItsOptions: a nested call joins the outer transaction
// and ignores its options, but still rejects invalid ones.
func TestNestedCallChecksItsOptions(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	var inner atomic.Int32
	var innerErr error
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		innerErr = txretry.RunInTx(ctx, f.db, func(context.Context, *sql.Tx) error {
			inner.Add(1)
			return nil
		}, txretry.WithMaxAttempts(0))
		return nil
	}, f.opts()...)
	if err != nil || !errors.Is(innerErr, txretry.ErrInvalidOption) || inner.Load() != 0 {
		t.Fatalf("outer err=%v inner err=%v inner fn runs=%d, want nil, ErrInvalidOption, 0", err, innerErr, inner.Load())
	}
}

// TestNestedCallJoinsAcrossCallsOnOtherHandles: db1, then db2, then db1
// again: the third call joins the first, the transaction TxOrDB(ctx, db1)
// gives there, instead of beginning a second one on db1 (on a pool of one
// connection it would wait for its own connection). Attempt and
// AfterCommit inside it are the first call's: its hooks run after db1's
// commit, and not at all when db1's transaction rolls back.
func TestNestedCallJoinsAcrossCallsOnOtherHandles(t *testing.T) {
	for _, outerErr := range []error{nil, errDomain} {
		t.Run(fmt.Sprint("outer returns ", outerErr), func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{})
			g := newFixture(t, &fakedb.Driver{})
			f.db.SetMaxOpenConns(1)
			// Bounds the old behaviour's wait for db1's only connection.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var hookRanAfter []int // db1's commits when the hook ran
			err := txretry.RunInTx(ctx, f.db, func(ctx context.Context, outer *sql.Tx) error {
				err := txretry.RunInTx(ctx, g.db, func(ctx context.Context, mid *sql.Tx) error {
					return txretry.RunInTx(ctx, f.db, func(ctx context.Context, inner *sql.Tx) error {
						if inner != outer {
							t.Error("the inner call on db1 began a transaction of its own")
						}
						if got := txretry.TxOrDB(ctx, f.db); got != inner {
							t.Errorf("TxOrDB(db1) in the inner call: %v, want its tx", got)
						}
						if got := txretry.TxOrDB(ctx, g.db); got != mid {
							t.Errorf("TxOrDB(db2) in the inner call: %v, want db2's tx", got)
						}
						if a := txretry.Attempt(ctx); a != 1 {
							t.Errorf("Attempt in the inner call: %d, want 1", a)
						}
						txretry.AfterCommit(ctx, func(context.Context) { hookRanAfter = append(hookRanAfter, f.drv.Stats().Commits) })
						_, err := inner.ExecContext(ctx, "UPDATE t SET v = 1")
						return err
					}, f.opts()...)
				}, g.opts()...)
				if err != nil {
					return err
				}
				return outerErr
			}, f.opts()...)
			if !errors.Is(err, outerErr) {
				t.Fatalf("err = %v, want %v", err, outerErr)
			}
			if s := f.drv.Stats(); s.Begins != 1 {
				t.Errorf("%d transactions began on db1, want 1", s.Begins)
			}
			if g.drv.Stats().Commits != 1 {
				t.Errorf("db2 committed %d times, want 1", g.drv.Stats().Commits)
			}
			want := []int{1} // after db1's one commit
			if outerErr != nil {
				want = nil // db1 rolled back: the inner work with it
				if s := f.drv.Stats(); s.Commits != 0 || s.Rollbacks != 1 {
					t.Errorf("db1: %d commits, %d rollbacks; want 0 and 1", s.Commits, s.Rollbacks)
				}
			}
			if !slices.Equal(hookRanAfter, want) {
				t.Errorf("the inner call's hook ran after db1's commits %v, want %v", hookRanAfter, want)
			}
		})
	}
}
