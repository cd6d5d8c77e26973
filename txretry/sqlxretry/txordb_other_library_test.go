package sqlxretry_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/sqlxretry"
)

// Inside another library's call on the same pool (txretry.RunInTx here;
// gormretry shares its transaction type), TxOrDB is that call's
// transaction, never the pool: its writes, plain and named, with db's
// placeholders, are the transaction's own and rolled back with it, and
// db.Unsafe()'s leniency holds. The other way round, txretry.TxOrDB inside
// an sqlxretry call is the *sql.Tx under fn's *sqlx.Tx.
func TestTxOrDBInAnotherLibrarysCall(t *testing.T) {
	forEachEngine(t, func(t *testing.T, db *sqlx.DB) {
		mustExec(t, db, "CREATE TABLE items (id INT PRIMARY KEY)")
		ctx := t.Context()
		errUndo := errors.New("undo")
		count := func(q sqlx.QueryerContext) (n int) {
			t.Helper()
			if err := sqlx.GetContext(ctx, q, &n, "SELECT COUNT(*) FROM items"); err != nil {
				t.Fatal(err)
			}
			return n
		}
		err := txretry.RunInTx(ctx, db.DB, func(ctx context.Context, tx *sql.Tx) error {
			d := sqlxretry.TxOrDB(ctx, db)
			if d == sqlxretry.DBTX(db) {
				return errors.New("TxOrDB is the pool inside a txretry.RunInTx call on it")
			}
			if _, err := d.ExecContext(ctx, d.Rebind("INSERT INTO items (id) VALUES (?)"), 1); err != nil {
				return err
			}
			if _, err := d.NamedExecContext(ctx, "INSERT INTO items (id) VALUES (:id)", map[string]any{"id": 2}); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM items").Scan(&n); err != nil || n != 2 {
				t.Errorf("the transaction sees %d of TxOrDB's rows (%v), want 2", n, err)
			}
			// A column the destination lacks: an error, except through
			// db.Unsafe().
			var row struct {
				ID int `db:"id"`
			}
			const q = "SELECT id, 1 AS extra FROM items WHERE id = 1"
			if err := d.GetContext(ctx, &row, q); err == nil {
				t.Error("a column missing from the destination was accepted without db.Unsafe()")
			}
			if err := sqlxretry.TxOrDB(ctx, db.Unsafe()).GetContext(ctx, &row, q); err != nil || row.ID != 1 {
				t.Errorf("through db.Unsafe(): id %d, %v; want 1, nil", row.ID, err)
			}
			return errUndo
		})
		if !errors.Is(err, errUndo) {
			t.Fatal(err)
		}
		if n := count(db); n != 0 {
			t.Errorf("%d row(s) written through TxOrDB after the transaction rolled back, want 0", n)
		}

		err = sqlxretry.RunInTx(ctx, db, func(ctx context.Context, tx *sqlx.Tx) error {
			if got := txretry.TxOrDB(ctx, db.DB); got != tx.Tx {
				t.Errorf("txretry.TxOrDB inside an sqlxretry call: %T, want fn's *sql.Tx", got)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
