package bunretry

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/txretry/txretry/txretry"
)

// TxOrDB returns the bun.Tx of the RunInTx call on db's pool that ctx is
// inside (ctx is fn's context, or derived from it), and db itself
// otherwise: for a ctx in no call, or in calls on other pools only. As with
// nested calls, db's clones (WithNamedArg, WithQueryHook) find the call
// too.
//
// As with txretry.TxOrDB, the transaction is the running attempt's: a
// context kept after fn returned still gives it, and its statements then
// fail with sql.ErrTxDone, never run on db. A txretry.RunInTx call on the
// same *sql.DB has a *sql.Tx, not a bun.Tx: TxOrDB returns db.
func TxOrDB(ctx context.Context, db *bun.DB) bun.IDB {
	if tx, ok := txretry.TxFromContext[*txretry.SQLTx[bunTx]](ctx, poolOf(db)); ok {
		return tx.Tx.Tx
	}
	return db
}
