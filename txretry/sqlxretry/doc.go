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
// transaction. So does a txretry.RunInTx (or gormretry call) on that same
// *sql.DB inside fn, on the *sqlx.Tx's *sql.Tx. The other way round, an
// sqlxretry call inside theirs is refused with txretry.ErrInvalidOption
// rather than run as a second transaction on the pool: sqlx makes no
// *sqlx.Tx from another library's *sql.Tx; use TxOrDB there.
//
// TxOrDB(ctx, db) returns the *sqlx.Tx of the call on db's pool that ctx
// is inside, and db otherwise, as a DBTX (sqlx.ExtContext, sqlc's
// database/sql methods, GetContext, SelectContext, NamedExecContext), for
// repository methods that run in the caller's transaction when there is
// one. Inside a call of another library on the pool (txretry.RunInTx,
// gormretry, bunretry) it is a DBTX on that call's *sql.Tx, bound as db
// binds; txretry.TxOrDB inside an sqlxretry call is the *sqlx.Tx's *sql.Tx.
//
// The real-server tests (conflicts, deadlocks, lost COMMITs through the
// fault proxy, TxOrDB) are in the integration module, package adapters.
package sqlxretry
