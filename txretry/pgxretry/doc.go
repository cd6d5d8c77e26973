// Package pgxretry runs pgx (native) transactions with txretry's retry
// engine: RunInTx takes a *pgxpool.Pool or *pgx.Conn (anything with pgx's
// BeginTx) and the same txretry options as txretry.RunInTx, with the same
// rules for what is retried, what is uncertain and what ctx governs.
//
//	err := pgxretry.RunInTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - $1 WHERE id = $2", amount, from)
//		return err
//	}, txretry.WithIsolation(sql.LevelSerializable))
//
// Isolation levels map to pgx's: sql.LevelReadUncommitted, LevelReadCommitted,
// LevelRepeatableRead (and LevelSnapshot) and LevelSerializable; other levels
// are rejected with txretry.ErrInvalidOption.
//
// One default differs from txretry.RunInTx's: WithLockTimeout is on, at
// txretry.DefaultLockTimeout (50 ms). A SERIALIZABLE or REPEATABLE READ
// transaction begins with SET LOCAL lock_timeout, sent with BEGIN in one
// message, so it costs no round trip; a lock wait that runs out fails the
// attempt with 55P03 and the attempt is retried, each such attempt doubling
// the next one's timeout. That ends deadlocks, which PostgreSQL finds only
// after deadlock_timeout (1 s), in 50 ms. txretry.WithLockTimeout(0) turns
// it off. A Beginner other than *pgxpool.Pool and *pgx.Conn must honour
// pgx.TxOptions.BeginQuery for it to apply.
//
// TxOrDB(ctx, pool) returns the pgx.Tx of the call on pool that ctx is
// inside, and pool otherwise, as sqlc's pgx/v5 DBTX:
// store.New(pgxretry.TxOrDB(ctx, pool)). A pgx.Tx must not be used from
// several goroutines at once; after fn returned it fails with
// pgx.ErrTxClosed.
package pgxretry
