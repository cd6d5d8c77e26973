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
	return dblock.Lock(ctx, sqlLockTx{tx}, d, key)
}

// sqlLockTx is the transaction a lease is held in.
type sqlLockTx struct{ tx *sql.Tx }

func (t sqlLockTx) Int(ctx context.Context, query string) (n int64, err error) {
	err = t.tx.QueryRowContext(ctx, query).Scan(&n)
	return n, err
}

func (t sqlLockTx) End() { _ = t.tx.Rollback() }
