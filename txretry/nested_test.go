package txretry_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"

	"errors"

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
