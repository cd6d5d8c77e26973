package scenarios

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txretry/txretry/txretry"
)

// TestFnEndsTheTransaction: fn writes a row, then tries to commit and to
// roll back the transaction itself, and returns nil.
//
//   - pgx-native: the pgx.Tx that fn gets refuses both with ErrTxEndedByFn
//     and does nothing; RunInTx commits, the row is there once.
//   - pgx-stdlib, mysql: *sql.Tx cannot refuse; fn's Commit commits, and
//     RunInTx returns ErrTxEndedByFn (fn's mistake, not an uncertain
//     commit). The row is there once, fn ran once.
func TestFnEndsTheTransaction(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, itemsDDL)
		runs := 0
		var commitErr, rollbackErr error
		err := p.run(ctx, func(ctx context.Context, q querier) error {
			runs++
			if err := q.exec(ctx, "INSERT INTO items (id) VALUES ($1)", 21); err != nil {
				return err
			}
			switch tx := q.handle().(type) {
			case pgx.Tx:
				commitErr, rollbackErr = tx.Commit(ctx), tx.Rollback(ctx)
			case *sql.Tx:
				commitErr, rollbackErr = tx.Commit(), tx.Rollback()
			default:
				t.Fatalf("fn got a %T", tx)
			}
			return nil
		})
		if p.sharesHandle {
			if commitErr != nil || !errors.Is(rollbackErr, sql.ErrTxDone) {
				t.Errorf("fn's Commit = %v, Rollback = %v; want nil and sql.ErrTxDone", commitErr, rollbackErr)
			}
			if !errors.Is(err, txretry.ErrTxEndedByFn) || errors.Is(err, txretry.ErrCommitUncertain) {
				t.Errorf("RunInTx = %v; want ErrTxEndedByFn, not an uncertain commit", err)
			}
		} else {
			if !errors.Is(commitErr, txretry.ErrTxEndedByFn) || !errors.Is(rollbackErr, txretry.ErrTxEndedByFn) {
				t.Errorf("fn's Commit = %v, Rollback = %v; want ErrTxEndedByFn for both", commitErr, rollbackErr)
			}
			if err != nil {
				t.Errorf("RunInTx = %v; want nil (RunInTx commits)", err)
			}
		}
		if runs != 1 {
			t.Errorf("fn ran %d times, want 1", runs)
		}
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM items WHERE id = $1", 21); n != 1 {
			t.Errorf("%d rows, want 1", n)
		}
	})
}
