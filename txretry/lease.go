package txretry

import (
	"context"
	"database/sql"
	"database/sql/driver"

	"github.com/txretry/txretry/txretry/internal/dblock"
)

// Lease holds the exclusive database lock of key on the *sql.DB (see
// LeaseSQL); a *sql.Conn cannot lease.
func (a sqlAdapter) Lease(ctx context.Context, key string) (func(), error) {
	db, ok := a.db.(*sql.DB)
	if !ok {
		return nil, dblock.ErrNoLease
	}
	return LeaseSQL(ctx, db, key)
}

// OverlapCommit reports a *sql.DB of MySQL or MariaDB (see
// OverlapCommitSQL).
func (a sqlAdapter) OverlapCommit() bool {
	db, ok := a.db.(*sql.DB)
	return ok && OverlapCommitSQL(db)
}

// OverlapCommitSQL implements AdapterOverlapCommit for an Adapter over a
// *sql.DB that leases with LeaseSQL: true for go-sql-driver/mysql (MySQL,
// MariaDB), false for PostgreSQL, another driver or a nil db.
func OverlapCommitSQL(db *sql.DB) bool {
	if db == nil {
		return false
	}
	d, err := sqlDialect(db, "lease")
	return err == nil && d == dblock.MySQL
}

// LeaseSQL implements AdapterLease for an Adapter over a *sql.DB, as
// RunInTx's own does: it holds the exclusive database lock named by key, in
// a transaction of its own on a connection of db, on PostgreSQL
// (pg_advisory_xact_lock) and MySQL/MariaDB (GET_LOCK), through pgx's
// stdlib, lib/pq or go-sql-driver/mysql. A pool with no connection free
// makes it wait for one within ctx, as an attempt's BEGIN would. It
// returns an error at once for another driver or database, a nil db, or
// when the leases of db would hold all but one of its connections
// (SetMaxOpenConns): the one left lets leased attempts BEGIN.
func LeaseSQL(ctx context.Context, db *sql.DB, key string) (release func(), err error) {
	if db == nil {
		return nil, dblock.ErrNoLease
	}
	d, err := sqlDialect(db, "lease")
	if err != nil {
		return nil, dblock.ErrNoLease
	}
	give, ok := dblock.Reserve(db, db.Stats().MaxOpenConnections)
	if !ok {
		return nil, dblock.ErrNoLease
	}
	unlock, err := leaseOn(ctx, db, d, key)
	if err != nil {
		give()
		return nil, err
	}
	return func() { unlock(); give() }, nil
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
