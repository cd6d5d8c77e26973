package txretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/txretry/txretry/txretry/internal/keylock"
)

// WithDatabaseKeyLocks makes the call's contention keys (WithContentionKeys)
// exclusive across processes too, through locks held by the database, so
// that replicas of a service that name the same keys take turns on them
// instead of failing each other's transactions. Each attempt, once the keys
// are its own inside the process, takes one lock per key on the connection
// its transaction then runs on, before BEGIN (a lock taken inside a
// SERIALIZABLE or REPEATABLE READ transaction would come after its
// snapshot), all in one statement and one fixed order, and releases them on
// that connection after COMMIT or ROLLBACK, on every path: an error or a
// panic in fn, a cancellation, an uncertain commit (a lost connection takes
// its locks with it; a pool's connection whose release failed is closed).
//
// PostgreSQL: session advisory locks, pg_advisory_lock(id) with id the
// FNV-1a 64 hash of "txretry:"+key, in the current database; MySQL and
// MariaDB: GET_LOCK of "txretry:" and that hash in 16 hex digits, server
// wide. Keys never reach the database or an error. The wait ends with the
// call's context, deadline and time budget.
//
// The locks need a server session of their own. PgBouncer in transaction
// pooling mode, which lends a server session per transaction, cannot keep
// them: with pgx and pgx's stdlib driver the lock statement locks only in
// the server process the connection announced at startup, so behind
// PgBouncer (which announces one of its own, in any pooling mode) every
// call fails at its first attempt, before fn and without locking, with an
// error matching ErrInvalidOption that names the cause. With lib/pq, whose
// connections do not tell that process, the check runs inside the
// transaction, after locking: a lock may then stay on a pooler's server
// session.
//
// Supported: RunInTx on a *sql.DB or *sql.Conn whose driver is pgx's
// stdlib, lib/pq or go-sql-driver/mysql, and pgxretry.RunInTx on a
// *pgxpool.Pool or *pgx.Conn; with another handle, driver or Adapter (one
// that is not an AdapterKeyLocks), or without WithContentionKeys, the call
// fails with an error matching ErrInvalidOption before any attempt. Each
// attempt costs two more statements (lock, release), and a *sql.DB's
// attempt holds its connection from the lock to the release. Default: off.
func WithDatabaseKeyLocks() Option {
	return func(c *config) { c.dbLocks = true }
}

// CheckKeyLocks accepts WithDatabaseKeyLocks on a *sql.DB or *sql.Conn of a
// known driver.
func (a sqlAdapter) CheckKeyLocks() error {
	_, err := sqlDialect(a.db, "WithDatabaseKeyLocks")
	return err
}

// BeginLocked takes the keys' database locks on one connection (a
// *sql.DB's is pinned for the attempt), begins the transaction on it and
// applies the lock timeout as BeginSQLOn does; the transaction's end
// releases the locks (see WithDatabaseKeyLocks).
func (a sqlAdapter) BeginLocked(ctx context.Context, o TxOptions, keys []string) (*SQLTx[*sql.Tx], error) {
	d, err := sqlDialect(a.db, "WithDatabaseKeyLocks")
	if err != nil {
		return nil, err
	}
	c := sqlLockConn{}
	switch h := a.db.(type) {
	case *sql.DB:
		if c.conn, err = h.Conn(ctx); err != nil {
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return nil, err
		}
		c.owned = true
	case *sql.Conn:
		c.conn = h
	}
	l := &keylock.Locks{Conn: c, Dialect: d, IDs: keylock.IDs(keys), Base: ErrInvalidOption}
	if d == keylock.Postgres {
		_ = c.conn.Raw(func(dc any) error { l.PID = keylock.BackendPID(dc); return nil })
	}
	tx, err := keylock.Begin(ctx, l, func(ctx context.Context) (*SQLTx[*sql.Tx], error) {
		return BeginSQL(ctx, func(ctx context.Context) (*sql.Tx, error) {
			return c.conn.BeginTx(ctx, &sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly})
		})
	}, func(ctx context.Context, tx *SQLTx[*sql.Tx], query string) (s int64, err error) {
		err = tx.Tx.QueryRowContext(ctx, query).Scan(&s)
		return
	})
	if err != nil {
		return nil, err
	}
	if err := setLockTimeout(ctx, d, tx, o); err != nil { // which rolled tx back
		l.Abandon(ctx)
		return nil, err
	}
	tx.locks = l
	return tx, nil
}

// sqlLockConn is the connection of an attempt's locks.
type sqlLockConn struct {
	conn  *sql.Conn
	owned bool // pinned from a *sql.DB for the attempt
}

func (c sqlLockConn) Row(ctx context.Context, query string) (a, b int64, err error) {
	var n sql.NullInt64
	err = c.conn.QueryRowContext(ctx, query).Scan(&n, &b)
	if !n.Valid {
		n.Int64 = -1
	}
	return n.Int64, b, err
}

func (c sqlLockConn) Owned() bool { return c.owned }

func (c sqlLockConn) Discard() {
	_ = c.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.conn.Close()
}

func (c sqlLockConn) Done() { _ = c.conn.Close() }

// errNoLease: the handle cannot lease now; the domain goes without.
var errNoLease = errors.New("txretry: no lease on this handle")

// Lease holds the exclusive database lock of key on a connection of the
// *sql.DB's own, for the contention manager (see AdapterLease): with pgx's
// stdlib driver on PostgreSQL (whose connections tell their server
// process, so that a pooler is noticed) and with go-sql-driver/mysql.
func (a sqlAdapter) Lease(ctx context.Context, key string) (func(), error) {
	db, ok := a.db.(*sql.DB)
	if !ok {
		return nil, errNoLease
	}
	d, err := sqlDialect(db, "lease")
	if s := db.Stats(); err != nil || s.MaxOpenConnections > 0 && s.InUse+2 > s.MaxOpenConnections {
		return nil, errNoLease // the lease and the attempt need a connection each
	}
	c := sqlLockConn{owned: true}
	if c.conn, err = db.Conn(ctx); err != nil {
		return nil, err
	}
	l := &keylock.Locks{Conn: c, Dialect: d, IDs: keylock.IDs([]string{key}), Base: ErrInvalidOption}
	if d == keylock.Postgres {
		_ = c.conn.Raw(func(dc any) error { l.PID = keylock.BackendPID(dc); return nil })
		if l.PID == 0 { // lib/pq: a pooler would go unnoticed
			c.Done()
			return nil, errNoLease
		}
	}
	if err := l.Lock(ctx); err != nil {
		return nil, err
	}
	return func() { _ = l.Release(context.Background(), DefaultCommitTimeout) }, nil
}
