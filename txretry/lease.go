package txretry

import (
	"context"
	"database/sql"
	"database/sql/driver"

	"github.com/txretry/txretry/txretry/internal/dblock"
)

// Lease holds the exclusive database lock of key on a connection of the
// *sql.DB's own, for the contention manager (see AdapterLease): with pgx's
// stdlib driver on PostgreSQL (whose connections tell their server
// process, so that a pooler is noticed) and with go-sql-driver/mysql.
func (a sqlAdapter) Lease(ctx context.Context, key string) (func(), error) {
	db, ok := a.db.(*sql.DB)
	if !ok {
		return nil, dblock.ErrNoLease
	}
	d, err := sqlDialect(db, "lease")
	if s := db.Stats(); err != nil || s.MaxOpenConnections > 0 && s.InUse+2 > s.MaxOpenConnections {
		return nil, dblock.ErrNoLease // the lease and the attempt need a connection each
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var pid uint32
	if d == dblock.Postgres {
		_ = conn.Raw(func(dc any) error { pid = dblock.BackendPID(dc); return nil })
		if pid == 0 { // lib/pq: a pooler would go unnoticed
			_ = conn.Close()
			return nil, dblock.ErrNoLease
		}
	}
	return dblock.Lock(ctx, sqlLockConn{conn}, d, pid, key)
}

// sqlLockConn is the connection a lease is held on.
type sqlLockConn struct{ conn *sql.Conn }

func (c sqlLockConn) Row(ctx context.Context, query string) (a, b int64, err error) {
	var n sql.NullInt64
	err = c.conn.QueryRowContext(ctx, query).Scan(&n, &b)
	if !n.Valid {
		n.Int64 = -1
	}
	return n.Int64, b, err
}

func (c sqlLockConn) Discard() {
	_ = c.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.conn.Close()
}

func (c sqlLockConn) Done() { _ = c.conn.Close() }
