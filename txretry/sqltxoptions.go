package txretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/txretry/txretry/txretry/internal/dblock"
)

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
	d := dblock.Unknown
	if o.LockTimeout > 0 {
		d, _ = sqlDialect(db, "WithLockTimeout") // before BEGIN: a *sql.Conn's Raw would wait for the transaction
	}
	drv := sqlDriverOf(db) // before BEGIN too
	tx, err := BeginSQL(ctx, begin)
	if err == nil {
		tx.driver = drv
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
func setLockTimeout[T SQLTransaction](ctx context.Context, d dblock.Dialect, tx *SQLTx[T], o TxOptions) error {
	if o.LockTimeout <= 0 || d != dblock.Postgres {
		return nil // MySQL and MariaDB find deadlocks as they form
	}
	err := tx.Exec(ctx, dblock.SetLockTimeout(o.LockTimeout))
	if err != nil {
		_ = tx.bounded(DefaultCommitTimeout, tx.Tx.Rollback)
	}
	return err
}

// sqlDialect tells the database behind db from its driver's type, for
// option (named in the error).
func sqlDialect(db DB, option string) (dblock.Dialect, error) {
	var d dblock.Dialect
	var what any
	switch h := db.(type) {
	case *sql.DB:
		if what = driverOf(h); what == nil {
			return 0, fmt.Errorf("%w: %s: the *sql.DB was not opened with sql.Open or sql.OpenDB", ErrInvalidOption, option)
		}
		d = dblock.Of(what)
	case *sql.Conn:
		if err := h.Raw(func(dc any) error { what, d = dc, dblock.Of(dc); return nil }); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("%w: %s needs a *sql.DB or *sql.Conn, not a %T", ErrInvalidOption, option, db)
	}
	if d == dblock.Unknown {
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
