// Package gormretry runs GORM transactions with txretry: the same engine,
// options and semantics as txretry.RunInTx, with fn receiving a *gorm.DB
// bound to the attempt's transaction. It is its own module, so that users
// of txretry alone never get GORM in their module graph, and it is built
// on txretry's exported Run, Adapter and SQLTx only.
//
//	err := gormretry.RunInTx(ctx, db, func(ctx context.Context, tx *gorm.DB) error {
//		var acct Account
//		if err := tx.First(&acct, from).Error; err != nil {
//			return err
//		}
//		return tx.Model(&acct).Update("balance", acct.Balance-amount).Error
//	}, txretry.WithIsolation(sql.LevelSerializable))
//
// # The transaction and the handle
//
// The transaction is begun on db's connection pool (the *sql.DB under it,
// through GORM's prepared-statement cache when it has one), with the
// context and options of the call: GORM's Begin, its
// DefaultTransactionTimeout and db's own context are not used, since
// ctx and WithCommitTimeout govern as in txretry.RunInTx. fn's *gorm.DB is
// db.WithContext(ctx) on that transaction: db's session settings (Logger,
// hooks, PrepareStmt, ...) apply to fn's statements. TxOrDB(ctx, db)
// returns such a *gorm.DB for the call on db's pool that ctx is inside,
// and db.WithContext(ctx) otherwise, for repository methods that run in
// the caller's transaction when there is one.
//
// The handle is the pool, not the *gorm.DB value: every Session,
// WithContext or Debug of one gorm.Open shares one default
// txretry.ContentionManager, and a
// call inside fn with fn's ctx joins the outer transaction, whether it is
// given db, any session of it, or fn's own tx. It is also
// txretry.RunInTx's handle on that *sql.DB, so the two join each other in
// either order. A *gorm.DB already in a transaction (fn's tx, or one from
// GORM's Begin) can only join the call that began it: passed with another
// context, RunInTx returns txretry.ErrInvalidOption instead of beginning a
// second transaction.
//
// # GORM's nested Transaction inside fn
//
// tx.Transaction(func(tx *gorm.DB) error {...}) inside fn behaves as GORM
// documents for a transaction in progress: it sets a SAVEPOINT, rolls
// back to it if its function fails, and returns that error; with
// DisableNestedTransaction it runs the function without one. It never
// commits: the commit and the retries stay with the outermost RunInTx. A
// serialization failure or deadlock inside it must still be returned from
// fn, because a savepoint cannot save the transaction: MariaDB/MySQL roll
// the whole transaction back on a deadlock, and PostgreSQL requires a
// serialization failure to be retried from the start. fn must not call
// tx.Commit or tx.Rollback: the call then fails with
// txretry.ErrTxEndedByFn.
//
// # Errors and TranslateError
//
// BEGIN and COMMIT errors come from the driver unchanged. Statement
// errors are GORM's db.Error. With gorm.Config{TranslateError: true},
// GORM's PostgreSQL dialector wraps the *pgconn.PgError of 23505, 23503,
// 23514 and 42703 in its own errors, which keeps the SQLSTATE reachable;
// its MySQL dialector replaces errors 1062, 1451 and 1452 by gorm's
// ErrDuplicatedKey and ErrForeignKeyViolated, which drops the number.
// Neither translates 40001, 40P01 or 1213, so the default classes reach
// the classifier either way (the tests check it on real servers), and so
// do pgerr's and mysqlerr's opt-in classes: PostgreSQL's 23505 keeps its
// SQLSTATE inside GORM's error, and no MySQL number GORM translates is in
// one. A classifier of one's own that looks for MySQL's 1062 must look
// for gorm.ErrDuplicatedKey instead when TranslateError is on.
//
// A *gorm.DB that meets a second error keeps the first only as text
// (GORM's AddError formats "first; second" with %v for the first): a
// deadlock followed by another error on the same chain is no longer
// found by any classifier. Return each statement's own error from fn as
// soon as it fails, as the examples do.
package gormretry
