package txretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/txretry/txretry/txretry/internal/keylock"
)

// CheckKeyLocks accepts WithDatabaseKeyLocks on a *sql.DB or *sql.Conn of a
// known driver.
func (a sqlAdapter) CheckKeyLocks() error {
	_, err := sqlDialect(a.db, "WithDatabaseKeyLocks")
	return err
}

// CheckTxOptions accepts WithLockTimeout where the adapter knows the
// database: on a *sql.DB or *sql.Conn of a known driver.
func (a sqlAdapter) CheckTxOptions(o TxOptions) error { return CheckSQLTxOptions(a.db, o) }

// CheckSQLTxOptions is CheckTxOptions for an adapter whose transactions
// database/sql begins on db (a *sql.DB or *sql.Conn), with BeginSQLOn: it
// accepts WithLockTimeout where db's driver is pgx's stdlib, lib/pq or
// go-sql-driver/mysql, and otherwise returns an error matching
// ErrInvalidOption that names the driver.
func CheckSQLTxOptions(db DB, o TxOptions) error {
	if o.LockTimeout <= 0 {
		return nil
	}
	_, err := sqlDialect(db, "WithLockTimeout")
	return err
}

// BeginSQLOn begins a transaction with begin as BeginSQL does, on db (the
// *sql.DB or *sql.Conn that begin begins on), and then applies what
// sql.TxOptions cannot carry: o.LockTimeout, as SET LOCAL lock_timeout on
// PostgreSQL through pgx's stdlib driver or lib/pq (a round trip). MySQL
// and MariaDB need none, and with another driver none is set
// (CheckSQLTxOptions refuses the option given explicitly there; the
// contention manager's armed default is best effort). If that statement
// fails, the transaction is rolled back and its error returned.
func BeginSQLOn[T SQLTransaction](ctx context.Context, db DB, o TxOptions, begin func(ctx context.Context) (T, error)) (*SQLTx[T], error) {
	d := keylock.Unknown
	if o.LockTimeout > 0 {
		d, _ = sqlDialect(db, "WithLockTimeout") // before BEGIN: a *sql.Conn's Raw would wait for the transaction
	}
	tx, err := BeginSQL(ctx, begin)
	if err == nil {
		err = setLockTimeout(ctx, d, tx, o)
	}
	if err != nil {
		return nil, err
	}
	return tx, nil
}

// setLockTimeout applies o.LockTimeout to a transaction just begun on a
// database of dialect d (see WithLockTimeout), and rolls the transaction
// back if that fails.
func setLockTimeout[T SQLTransaction](ctx context.Context, d keylock.Dialect, tx *SQLTx[T], o TxOptions) error {
	if o.LockTimeout <= 0 || d != keylock.Postgres {
		return nil // MySQL and MariaDB find deadlocks as they form
	}
	err := tx.Exec(ctx, keylock.SetLockTimeout(o.LockTimeout))
	if err != nil {
		_ = tx.bounded(DefaultCommitTimeout, tx.Tx.Rollback)
	}
	return err
}

// sqlDialect tells the database behind db from its driver's type, for
// option (named in the error).
func sqlDialect(db DB, option string) (keylock.Dialect, error) {
	var d keylock.Dialect
	var what any
	switch h := db.(type) {
	case *sql.DB:
		if what = driverOf(h); what == nil {
			return 0, fmt.Errorf("%w: %s: the *sql.DB was not opened with sql.Open or sql.OpenDB", ErrInvalidOption, option)
		}
		d = keylock.Of(what)
	case *sql.Conn:
		if err := h.Raw(func(dc any) error { what, d = dc, keylock.Of(dc); return nil }); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("%w: %s needs a *sql.DB or *sql.Conn, not a %T", ErrInvalidOption, option, db)
	}
	if d == keylock.Unknown {
		return 0, fmt.Errorf("%w: %s: driver %T is not one of pgx's stdlib, lib/pq or go-sql-driver/mysql, so its database's locks are unknown", ErrInvalidOption, option, what)
	}
	return d, nil
}

// driverOf is db.Driver(), or nil for a *sql.DB not opened with sql.Open
// or sql.OpenDB (a zero sql.DB), whose Driver panics.
func driverOf(db *sql.DB) (d driver.Driver) {
	defer func() {
		if recover() != nil {
			d = nil
		}
	}()
	return db.Driver()
}

// BeginLocked takes the keys' database locks on one connection (a
// *sql.DB's is pinned for the attempt) and begins the transaction on it;
// the transaction's end releases them (see WithDatabaseKeyLocks).
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
	if err := l.Lock(ctx); err != nil {
		return nil, err
	}
	tx, err := BeginSQL(ctx, func(ctx context.Context) (*sql.Tx, error) {
		return c.conn.BeginTx(ctx, &sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly})
	})
	if err == nil && l.NeedsTxCheck() {
		var s int64
		if err = tx.Tx.QueryRowContext(ctx, keylock.SessionQuery(d)).Scan(&s); err == nil {
			err = l.CheckTx(s)
		}
		if err != nil {
			_ = tx.bounded(DefaultCommitTimeout, tx.Tx.Rollback)
		}
	}
	if err == nil {
		err = setLockTimeout(ctx, d, tx, o)
	}
	if err != nil {
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
