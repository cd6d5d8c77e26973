package txretry_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

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

func TestFnEndingTheTransactionItselfIsAnError(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		return tx.Commit()
	}, f.opts()...)
	if !errors.Is(err, txretry.ErrTxEndedByFn) || !errors.Is(err, sql.ErrTxDone) {
		t.Fatalf("err = %v, want ErrTxEndedByFn", err)
	}
}
