package txretry

import (
	"context"
	"database/sql"
	"database/sql/driver"

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
	return leaseOn(ctx, db, d, key)
}

// leaseOn takes the lock on a connection had within ctx, BEGIN and ROLLBACK
// as its statements (a *sql.Tx ends with ctx; its Rollback has no timeout).
func leaseOn(ctx context.Context, db *sql.DB, d dblock.Dialect, key string) (func(), error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	end := func(ok bool) {
		rctx, cancel := context.WithTimeout(context.Background(), DefaultCommitTimeout)
		defer cancel()
		if _, err := conn.ExecContext(rctx, "ROLLBACK"); err != nil || !ok {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = conn.Close()
	}
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		end(false)
		return nil, err
	}
	return dblock.Lock(ctx, d, key, func(ctx context.Context, q string) (n int64, err error) {
		err = conn.QueryRowContext(ctx, q).Scan(&n)
		return n, err
	}, end)
}
