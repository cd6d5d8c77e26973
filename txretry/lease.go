package txretry

import (
	"context"
	"database/sql"

	"github.com/txretry/txretry/txretry/internal/dblock"
)

// Lease holds the exclusive database lock of key in a transaction of its
// own on the *sql.DB, for the contention manager (see AdapterLease): on
// PostgreSQL (pg_advisory_xact_lock) and MySQL/MariaDB (GET_LOCK).
func (a sqlAdapter) Lease(ctx context.Context, key string) (func(), error) {
	db, ok := a.db.(*sql.DB)
	if !ok {
		return nil, dblock.ErrNoLease
	}
	d, err := sqlDialect(db, "lease")
	if s := db.Stats(); err != nil || s.MaxOpenConnections > 0 && s.InUse+2 > s.MaxOpenConnections {
		return nil, dblock.ErrNoLease // the lease and the attempt need a connection each
	}
	// Without ctx's cancellation: database/sql would roll the transaction
	// back when ctx ends, and ctx bounds only the wait for the lock.
	tx, err := db.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return nil, err
	}
	return dblock.Lock(ctx, d, key, func(ctx context.Context, q string) (n int64, err error) {
		err = tx.QueryRowContext(ctx, q).Scan(&n)
		return n, err
	}, func() { _ = tx.Rollback() })
}
