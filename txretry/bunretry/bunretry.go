package bunretry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
)

// RunInTx runs fn in a transaction on db and commits it, re-running the
// whole transaction when the database reports a serialization failure or a
// deadlock, with the semantics and options of txretry.RunInTx. fn must not
// commit or roll back tx itself (txretry.ErrTxEndedByFn). A nil db or fn,
// or a *bun.DB not made by bun.NewDB, returns txretry.ErrInvalidOption.
func RunInTx(ctx context.Context, db *bun.DB, fn func(ctx context.Context, tx bun.Tx) error, opts ...txretry.Option) error {
	if fn == nil {
		return fmt.Errorf("%w: nil fn", txretry.ErrInvalidOption)
	}
	pool := poolOf(db)
	if pool == nil {
		return fmt.Errorf("%w: nil *bun.DB, or one not made by bun.NewDB", txretry.ErrInvalidOption)
	}
	return txretry.Run(ctx, adapter{db: db, pool: pool, fn: fn}, opts...)
}

// poolOf returns the *sql.DB under db, nil for a nil *bun.DB or one
// without (a zero bun.DB, whose state pointer is nil: reading its DB field
// panics, which is recovered here).
func poolOf(db *bun.DB) (pool *sql.DB) {
	if db == nil {
		return nil
	}
	defer func() {
		if recover() != nil {
			pool = nil
		}
	}()
	return db.DB
}

// adapter runs bun transactions in txretry's engine.
type adapter struct {
	db   *bun.DB
	pool *sql.DB
	fn   func(ctx context.Context, tx bun.Tx) error
}

var (
	_ txretry.AdapterHandle         = adapter{}
	_ txretry.AdapterCheckTxOptions = adapter{}
	_ txretry.AdapterFunc           = adapter{}
	_ txretry.AdapterLease          = adapter{}
	_ txretry.AdapterOverlapCommit  = adapter{}
)

// Begin begins with bun's own BeginTx, so that its query hooks see BEGIN
// and COMMIT as with bun's RunInTx.
func (a adapter) Begin(ctx context.Context, o txretry.TxOptions) (*txretry.SQLTx[bunTx], error) {
	tx, err := txretry.BeginSQLOn(ctx, a.pool, o, func(ctx context.Context) (bunTx, error) {
		tx, err := a.db.BeginTx(ctx, &sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly})
		return bunTx{tx}, err
	})
	return tx, withSQLState(err)
}

// CheckTxOptions accepts txretry.WithLockTimeout where txretry.RunInTx
// does: on pgx's stdlib driver, lib/pq and go-sql-driver/mysql (not bun's
// pgdriver, which is not among the drivers txretry tells apart).
func (a adapter) CheckTxOptions(o txretry.TxOptions) error {
	return txretry.CheckSQLTxOptions(a.pool, o)
}

func (a adapter) Call(ctx context.Context, tx *txretry.SQLTx[bunTx]) error {
	return withSQLState(a.fn(ctx, tx.Tx.Tx))
}

// bunTx is a bun.Tx whose COMMIT errors, and those of the statements the
// verifiers run (WithCommitMarker's duplicate key), show their SQLSTATE.
type bunTx struct{ bun.Tx }

func (t bunTx) Commit() error { return withSQLState(t.Tx.Commit()) }

func (t bunTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r, err := t.Tx.ExecContext(ctx, query, args...)
	return r, withSQLState(err)
}

// withSQLState gives err a SQLState method when its tree holds an error of
// bun's pgdriver (pgdriver.Error, whose SQLSTATE is Field('C')) and no
// SQLSTATE that pgerr finds otherwise: txretry's classifier and its
// judgement of COMMIT errors then see it as they see pgx's. pgdriver is
// recognised by that method, so that this module does not import it.
func withSQLState(err error) error {
	if err == nil || pgerr.SQLState(err) != "" {
		return err
	}
	var f interface{ Field(k byte) string }
	if errors.As(err, &f) {
		if code := f.Field('C'); len(code) == 5 {
			return &sqlStateError{err: err, code: code}
		}
	}
	return err
}

type sqlStateError struct {
	err  error
	code string
}

func (e *sqlStateError) Error() string    { return e.err.Error() }
func (e *sqlStateError) Unwrap() error    { return e.err }
func (e *sqlStateError) SQLState() string { return e.code }

// Handle is the *sql.DB under db: the same for db and its clones
// (WithNamedArg, WithQueryHook), which share one pool.
func (a adapter) Handle() any { return a.pool }

// Lease lets the processes that share a conflict domain take turns on it
// through a lock in the database, as txretry.RunInTx's calls do (see
// txretry.LeaseSQL).
func (a adapter) Lease(ctx context.Context, key string) (func(), error) {
	return txretry.LeaseSQL(ctx, a.pool, key)
}

// OverlapCommit reports MySQL or MariaDB (see txretry.OverlapCommitSQL).
func (a adapter) OverlapCommit() bool { return txretry.OverlapCommitSQL(a.pool) }

// Func is the caller's fn (Call wraps its error, not fn).
func (a adapter) Func() any { return a.fn }
