package gormretry

import (
	"context"
	"database/sql"

	"gorm.io/gorm"

	"github.com/txretry/txretry/txretry"
)

// TxOrDB returns db.WithContext(ctx), bound to the transaction of the
// RunInTx call on db's connection pool that ctx is inside (ctx is fn's
// context, or derived from it) as fn's tx is, or to db's pool when ctx is
// in no call on it (calls on other pools are never taken for one on db's).
// A db already in a transaction (fn's tx) keeps it. The call may be any
// library's on the same *sql.DB (txretry.RunInTx, sqlxretry, bunretry):
// GORM runs on the *sql.Tx under its transaction, as txretry.TxOrDB gives
// it.
// A nil db returns nil; one that RunInTx would refuse returns
// db.WithContext(ctx).
//
// As with txretry.TxOrDB, the transaction is the running attempt's: a
// context kept after fn returned still gives it, and its statements then
// fail with sql.ErrTxDone, never run on the pool.
func TxOrDB(ctx context.Context, db *gorm.DB) *gorm.DB {
	if db == nil {
		return nil
	}
	a, err := newAdapter(db, nil)
	if err != nil || a.inTx != nil {
		return db.WithContext(ctx)
	}
	if h, ok := a.handle.(txretry.DBTX); ok {
		if tx, ok := txretry.TxOrDB(ctx, h).(*sql.Tx); ok {
			return onTx(ctx, db, tx)
		}
	}
	return db.WithContext(ctx)
}
