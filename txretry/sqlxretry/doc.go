// Package sqlxretry runs sqlx transactions with txretry: the same engine,
// options and semantics as txretry.RunInTx, with fn receiving a *sqlx.Tx.
// It is its own module, so that users of txretry alone never get sqlx in
// their module graph, and it is built on txretry's exported Run, Adapter
// and SQLTx only.
//
//	err := sqlxretry.RunInTx(ctx, db, func(ctx context.Context, tx *sqlx.Tx) error {
//		var balance int
//		if err := tx.GetContext(ctx, &balance, tx.Rebind("SELECT balance FROM accounts WHERE id = ?"), from); err != nil {
//			return err
//		}
//		_, err := tx.ExecContext(ctx, tx.Rebind("UPDATE accounts SET balance = ? WHERE id = ?"), balance-amount, from)
//		return err
//	}, txretry.WithIsolation(sql.LevelSerializable))
//
// The handle is the *sql.DB under the *sqlx.DB, so that db and its copies
// (db.Unsafe(), another sqlx.NewDb on the pool) share one default
// txretry.ContentionManager, and a
// call inside fn with fn's context on any of them joins the outer
// transaction. A txretry.RunInTx on that same *sql.DB inside fn (or
// around it) is refused with txretry.ErrInvalidOption rather than run as
// a second transaction on the pool: a *sqlx.Tx cannot be made from a
// *sql.Tx outside sqlx, so the two cannot share one; use the *sqlx.Tx
// (its *sql.Tx is embedded).
//
// TxOrDB(ctx, db) returns the *sqlx.Tx of the call on db's pool that ctx
// is inside, and db otherwise, as a DBTX (sqlx.ExtContext, sqlc's
// database/sql methods, GetContext, SelectContext, NamedExecContext), for
// repository methods that run in the caller's transaction when there is
// one.
//
// The real-server tests (conflicts, deadlocks, lost COMMITs through the
// fault proxy, TxOrDB) are in the integration module, package adapters.
package sqlxretry
