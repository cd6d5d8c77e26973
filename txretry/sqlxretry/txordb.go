package sqlxretry

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"

	"github.com/txretry/txretry/txretry"
)

// DBTX is what *sqlx.DB and *sqlx.Tx have in common for repository code:
// sqlx.ExtContext (for sqlx.GetContext, sqlx.NamedExecContext and the
// like), sqlc's database/sql methods (txretry.DBTX), GetContext,
// SelectContext and NamedExecContext.
type DBTX interface {
	sqlx.ExtContext
	txretry.DBTX
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
	NamedExecContext(ctx context.Context, query string, arg any) (sql.Result, error)
}

var (
	_ DBTX = (*sqlx.DB)(nil)
	_ DBTX = (*sqlx.Tx)(nil)
)

// TxOrDB returns the *sqlx.Tx of the RunInTx call on db's pool that ctx is
// inside (ctx is fn's context, or derived from it), and db itself
// otherwise: for a ctx in no call, or in calls on other pools only. As with
// nested calls, db's copies (db.Unsafe(), another sqlx.NewDb on the pool)
// find the call too.
//
// As with txretry.TxOrDB, the transaction is the running attempt's: a
// context kept after fn returned still gives it, and its statements then
// fail with sql.ErrTxDone, never run on db. A txretry.RunInTx call on the
// same *sql.DB has a *sql.Tx, not a *sqlx.Tx: TxOrDB returns db.
func TxOrDB(ctx context.Context, db *sqlx.DB) DBTX {
	if db == nil || db.DB == nil {
		return db
	}
	if tx, ok := txretry.TxFromContext[*txretry.SQLTx[*sqlx.Tx]](ctx, db.DB); ok {
		return tx.Tx
	}
	return db
}
