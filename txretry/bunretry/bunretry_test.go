package bunretry_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/bunretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/internal/gatetest"
)

// The real-server tests (conflicts, deadlocks, lost COMMITs, savepoints)
// are in the integration module, package adapters; these need no database.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, drv *fakedb.Driver) *bun.DB {
	t.Helper()
	db := bun.NewDB(drv.DB(), pgdialect.New())
	t.Cleanup(func() {
		if n := db.DB.Stats().InUse; n != 0 {
			t.Errorf("%d connection(s) still in use", n)
		}
		db.Close()
	})
	return db
}

func TestInvalidInput(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context, bun.Tx) error { return nil }
	for name, db := range map[string]*bun.DB{"nil": nil, "zero": {}} {
		if err := bunretry.RunInTx(ctx, db, fn); !errors.Is(err, txretry.ErrInvalidOption) {
			t.Errorf("%s db: %v", name, err)
		}
	}
	if err := bunretry.RunInTx(ctx, open(t, &fakedb.Driver{}), nil); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Errorf("nil fn: %v", err)
	}
	if err := bunretry.RunInTx(ctx, open(t, &fakedb.Driver{}), fn, txretry.WithLockTimeout(time.Second)); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Errorf("WithLockTimeout on a driver whose database is unknown: %v", err)
	}
}

// A call inside fn on db or a clone of it, or txretry.RunInTx on the
// pool, joins; a bunretry call inside txretry.RunInTx on the pool is
// refused rather than run as a second transaction.
func TestNestedCalls(t *testing.T) {
	drv := &fakedb.Driver{}
	db := open(t, drv)
	err := bunretry.RunInTx(context.Background(), db, func(ctx context.Context, tx bun.Tx) error {
		for _, inner := range []*bun.DB{db, db.WithNamedArg("x", 1)} {
			err := bunretry.RunInTx(ctx, inner, func(ctx context.Context, itx bun.Tx) error {
				if itx.Tx != tx.Tx {
					t.Error("the nested call got another transaction")
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		err := txretry.RunInTx(ctx, db.DB, func(ctx context.Context, inner *sql.Tx) error {
			if inner != tx.Tx {
				t.Error("txretry.RunInTx on the pool inside fn began a transaction of its own")
			}
			return nil
		})
		return err
	})
	if err != nil || drv.Stats().Begins != 1 {
		t.Fatalf("err = %v, %d transactions, want one", err, drv.Stats().Begins)
	}
	// The other way round a bun.Tx cannot be made.
	err = txretry.RunInTx(context.Background(), db.DB, func(ctx context.Context, _ *sql.Tx) error {
		return bunretry.RunInTx(ctx, db, func(context.Context, bun.Tx) error { return nil })
	})
	if !errors.Is(err, txretry.ErrInvalidOption) {
		t.Errorf("bunretry.RunInTx inside txretry.RunInTx on the pool: %v, want ErrInvalidOption", err)
	}
}

// fieldError is shaped like bun's pgdriver.Error: the SQLSTATE is
// Field('C').
type fieldError struct{ code string }

func (e fieldError) Error() string { return "ERROR #" + e.code + " secret row data" }
func (e fieldError) Field(k byte) string {
	if k == 'C' {
		return e.code
	}
	return ""
}

// pgdriver's errors are classified like pgx's: from fn and at COMMIT, a
// serialization failure is retried, and a COMMIT the server answered with
// another error is not taken for an uncertain one.
func TestPgdriverErrors(t *testing.T) {
	drv := &fakedb.Driver{OnCommit: func(n int) error {
		switch n {
		case 1:
			return fieldError{"40001"}
		case 3:
			return fieldError{"23505"}
		}
		return nil
	}}
	db := open(t, drv)
	calls := 0
	err := bunretry.RunInTx(context.Background(), db, func(ctx context.Context, tx bun.Tx) error {
		calls++
		if calls == 2 {
			return fmt.Errorf("repo: %w", fieldError{"40P01"})
		}
		return nil
	}, txretry.WithBackoff(txretry.Constant(time.Millisecond)), txretry.WithoutContentionManager())
	if err != nil || calls != 3 {
		t.Fatalf("err = %v after %d calls, want success at the third", err, calls)
	}
	err = bunretry.RunInTx(context.Background(), db, func(context.Context, bun.Tx) error { return nil })
	var fe fieldError
	if !pgerr.IsUniqueViolation(err) || errors.Is(err, txretry.ErrCommitUncertain) || !errors.As(err, &fe) {
		t.Fatalf("err = %v, want the COMMIT's 23505, not uncertain, still a pgdriver error", err)
	}
}

// fn ending the transaction itself is reported, not taken for an
// uncertain commit.
func TestFnCannotCommit(t *testing.T) {
	db := open(t, &fakedb.Driver{})
	err := bunretry.RunInTx(context.Background(), db, func(ctx context.Context, tx bun.Tx) error { return tx.Commit() })
	if !errors.Is(err, txretry.ErrTxEndedByFn) || errors.Is(err, txretry.ErrCommitUncertain) {
		t.Fatalf("err = %v, want ErrTxEndedByFn", err)
	}
}

// db and its clones share the pool's default manager: a call on a clone
// queues behind a call on db at the closed gate of their label.
func TestContentionManagerPerPool(t *testing.T) {
	db := open(t, &fakedb.Driver{})
	gatetest.Close(t, db.DB, "k")
	err := bunretry.RunInTx(context.Background(), db, func(ctx context.Context, tx bun.Tx) error {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err := bunretry.RunInTx(cctx, db.WithNamedArg("x", 1), func(context.Context, bun.Tx) error { return nil }, txretry.WithLabel("k"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a call of the same domain on a clone ran at once: %v", err)
		}
		return nil
	}, txretry.WithLabel("k"))
	if err != nil {
		t.Fatal(err)
	}
}
