package txretry

import (
	"context"
	"database/sql"
)

// DBTX is what sqlc's code generated for database/sql needs of a database
// handle (sqlc's own DBTX): *sql.DB, *sql.Conn and *sql.Tx have it, so
// that store.New(txretry.TxOrDB(ctx, db)) works.
type DBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// TxOrDB returns the *sql.Tx of the RunInTx call on db that ctx is inside
// (ctx is fn's context, or derived from it), and db itself otherwise: for a
// ctx in no call, or in calls on other handles only (a call on another
// handle is never mistaken for one on db). db is the handle given to
// RunInTx, typically a *sql.DB or a *sql.Conn. A repository method written
// against TxOrDB(ctx, db) thus runs in the caller's transaction when there
// is one and on db when there is none.
//
// The transaction is the running attempt's. A context kept after fn
// returned, or used by a goroutine that outlives fn, still gives that
// attempt's transaction, never db and never a later attempt's: once the
// attempt ended its statements fail with sql.ErrTxDone, so nothing runs
// outside the transaction by mistake. A *sql.Tx may be used from several
// goroutines while fn runs, but RunInTx commits as soon as fn returns: wait
// for them in fn. The transaction of another adapter's call on the same
// *sql.DB (sqlxretry, bunretry) is not a *sql.Tx: TxOrDB returns db.
func TxOrDB(ctx context.Context, db DBTX) DBTX {
	if tx, ok := TxFromContext[*SQLTx[*sql.Tx]](ctx, db); ok {
		return tx.Tx
	}
	return db
}

// TxFromContext is how an adapter finds the transaction of the call on its
// handle that ctx is inside, to give its users a TxOrDB: it returns the T
// that the adapter's Begin returned for the running attempt of the
// nearest such call, and true: the call that a nested call on handle
// joins. handle is compared with the calls' handles (AdapterHandle) as
// nested calls compare them; calls on other handles are skipped. It returns T's zero value and false when ctx (nil
// included) is inside no call on handle, or when that call's transaction
// is not a T (another adapter's, on the same handle).
//
// Like TxOrDB's, the transaction is the attempt's, and ended once that
// attempt ended: an adapter should hand it out as it is (its statements
// then fail), never its handle instead.
func TxFromContext[T Tx](ctx context.Context, handle any) (tx T, ok bool) {
	if v := callOn(ctx, handle); v != nil {
		tx, ok = v.tx.(T)
	}
	return tx, ok
}
