package bunretry_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/bunretry"
	"github.com/txretry/txretry/txretry/internal/dbtest"
)

type item struct {
	bun.BaseModel `bun:"table:items"`
	ID            int `bun:"id,pk"`
}

// Inside another library's call on the same pool (txretry.RunInTx here;
// gormretry shares its transaction type), TxOrDB is that call's
// transaction, never the pool: its writes (a model, a raw query, ExecContext
// with bun's placeholders) are the transaction's own and rolled back with
// it, and a savepoint, which needs a bun.Tx, is refused. The other way
// round, txretry.TxOrDB inside a bunretry call is the *sql.Tx under fn's
// bun.Tx.
func TestTxOrDBInAnotherLibrarysCall(t *testing.T) {
	dbtest.ForEach(t, "bunretry", func(t *testing.T, e dbtest.Engine, pool *sql.DB) {
		var db *bun.DB
		if e.Name == "postgres" {
			db = bun.NewDB(pool, pgdialect.New())
		} else {
			db = bun.NewDB(pool, mysqldialect.New())
		}
		ctx := t.Context()
		if _, err := db.NewCreateTable().Model((*item)(nil)).Exec(ctx); err != nil {
			t.Fatal(err)
		}
		errUndo := errors.New("undo")
		err := txretry.RunInTx(ctx, pool, func(ctx context.Context, tx *sql.Tx) error {
			d := bunretry.TxOrDB(ctx, db)
			if d == bun.IDB(db) {
				return errors.New("TxOrDB is the pool inside a txretry.RunInTx call on it")
			}
			if _, err := d.NewInsert().Model(&item{ID: 1}).Exec(ctx); err != nil {
				return err
			}
			if _, err := d.NewRaw("INSERT INTO items (id) VALUES (?)", 2).Exec(ctx); err != nil {
				return err
			}
			if _, err := d.ExecContext(ctx, "INSERT INTO items (id) VALUES (?)", 3); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM items").Scan(&n); err != nil || n != 3 {
				t.Errorf("the transaction sees %d of TxOrDB's rows (%v), want 3", n, err)
			}
			if n, err := d.NewSelect().Model((*item)(nil)).Count(ctx); err != nil || n != 3 {
				t.Errorf("TxOrDB sees %d of the transaction's rows (%v), want 3", n, err)
			}
			if err := d.RunInTx(ctx, nil, func(context.Context, bun.Tx) error { return nil }); !errors.Is(err, txretry.ErrInvalidOption) {
				t.Errorf("a savepoint on TxOrDB: %v, want ErrInvalidOption", err)
			}
			return errUndo
		})
		if !errors.Is(err, errUndo) {
			t.Fatal(err)
		}
		if n, err := db.NewSelect().Model((*item)(nil)).Count(ctx); err != nil || n != 0 {
			t.Errorf("%d row(s) written through TxOrDB after the transaction rolled back (%v), want 0", n, err)
		}

		err = bunretry.RunInTx(ctx, db, func(ctx context.Context, tx bun.Tx) error {
			if got := txretry.TxOrDB(ctx, pool); got != tx.Tx {
				t.Errorf("txretry.TxOrDB inside a bunretry call: %T, want fn's *sql.Tx", got)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
