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
package pgxretry
