// Package bunretry runs bun transactions with txretry: the same engine,
// options and semantics as txretry.RunInTx, with fn receiving a bun.Tx.
// It is its own module, so that users of txretry alone never get bun in
// their module graph, and it is built on txretry's exported Run, Adapter
// and SQLTx only.
//
//	err := bunretry.RunInTx(ctx, db, func(ctx context.Context, tx bun.Tx) error {
//		var acct Account
//		if err := tx.NewSelect().Model(&acct).Where("id = ?", from).Scan(ctx); err != nil {
//			return err
//		}
//		acct.Balance -= amount
//		_, err := tx.NewUpdate().Model(&acct).WherePK().Exec(ctx)
//		return err
//	}, txretry.WithIsolation(sql.LevelSerializable))
//
// The transaction is begun with bun's BeginTx, so bun's query hooks see
// BEGIN, COMMIT and ROLLBACK as with bun's own RunInTx; ctx and
// WithCommitTimeout govern them as in txretry.RunInTx. fn should run its
// queries with the ctx it receives (Scan(ctx), Exec(ctx)): bun.Tx's own
// context, used by its methods without one, does not end with the
// caller's.
//
// TxOrDB(ctx, db) returns, as a bun.IDB, the bun.Tx of the call on db's
// pool that ctx is inside, and db otherwise, for repository methods that
// run in the caller's transaction when there is one. Inside a call of
// another library on the pool (txretry.RunInTx, gormretry, sqlxretry) it
// is a bun.IDB on that call's *sql.Tx (see TxOrDB); txretry.TxOrDB inside
// a bunretry call is the bun.Tx's *sql.Tx.
//
// The handle is the *sql.DB under the *bun.DB, so that db and its clones
// (WithNamedArg, WithQueryHook) share one default
// txretry.ContentionManager and a call
// inside fn with fn's ctx on any of them joins the outer transaction. So
// does a txretry.RunInTx (or gormretry call) on that same *sql.DB inside
// fn, on the bun.Tx's *sql.Tx. The other way round, a bunretry call inside
// theirs is refused with txretry.ErrInvalidOption rather than run as a
// second transaction on the pool: bun makes no bun.Tx from another
// library's *sql.Tx; use TxOrDB there.
//
// bun's nested transactions inside fn, tx.RunInTx or tx.BeginTx, are
// savepoints, as bun documents: an error of the inner function rolls back
// to the savepoint and is returned; they never commit. A serialization
// failure or deadlock met inside one must still be returned from fn, so
// that the whole transaction is retried: a savepoint cannot save a
// transaction the server chose as a victim.
//
// bun passes driver errors through unwrapped (*pgconn.PgError from pgx's
// stdlib driver, *mysql.MySQLError), so the classifier sees every SQLSTATE
// and error number. bun's own PostgreSQL driver, pgdriver, reports the
// SQLSTATE of its pgdriver.Error only as Field('C'); RunInTx gives the
// errors of BEGIN, fn and COMMIT that hold one a SQLState method (keeping
// the original reachable with errors.As), so that the default classes and
// pgerr's opt-in ones, and the rules that tell a COMMIT the server
// answered from an uncertain one, work with pgdriver as with pgx. A
// classifier of one's own (WithClassifier) gets those errors too.
package bunretry
