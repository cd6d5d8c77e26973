package txretry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/txretry/txretry/internal/core"
)

// DB begins database/sql transactions: *sql.DB and *sql.Conn satisfy it.
type DB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// RunInTx runs fn in a transaction on db and commits it, re-running the
// whole transaction (roll back, wait, begin anew, call fn again) when the
// database reports a serialization failure or a deadlock; see the package
// documentation for the exact rules and the options.
//
// fn receives a context derived from ctx (for its statements) and the
// attempt's transaction. fn must not commit or roll back the transaction
// itself, must not keep it after returning, and should be safe to run more
// than once: only its database effects are undone between attempts.
//
// What ctx governs: BEGIN, fn's statements (when fn passes the context it
// received), the waits between attempts and verification. It does not
// govern COMMIT: once fn has returned nil, the transaction is committed
// under WithCommitTimeout even if ctx ends meanwhile, so that a cancellation
// never by itself makes a commit uncertain. The transaction is therefore
// begun on a context that does not carry ctx's cancellation.
func RunInTx(ctx context.Context, db DB, fn func(ctx context.Context, tx *sql.Tx) error, opts ...Option) error {
	if isNil(db) {
		return fmt.Errorf("%w: nil DB", ErrInvalidOption)
	}
	if fn == nil {
		return fmt.Errorf("%w: nil fn", ErrInvalidOption)
	}
	return run(ctx, &sqlAdapter{db: db, fn: fn}, opts)
}

// sqlAdapter adapts database/sql to the engine.
type sqlAdapter struct {
	db DB
	fn func(ctx context.Context, tx *sql.Tx) error
}

func (a *sqlAdapter) Key() any { return a.db }

func (a *sqlAdapter) Begin(ctx context.Context, o core.TxOptions) (core.Tx, error) {
	return beginSQL(ctx, a.db, o)
}

func (a *sqlAdapter) Call(ctx context.Context, tx core.Tx) error { return a.fn(ctx, tx.(*sqlTx).tx) }

func (a *sqlAdapter) NotCommitted(err error) bool { return errors.Is(err, ErrTxEndedByFn) }

func (a *sqlAdapter) Check(core.TxOptions) error { return nil }

func (a *sqlAdapter) SingleConn() bool {
	_, ok := a.db.(*sql.Conn)
	return ok
}

func (a *sqlAdapter) Scope() any {
	switch h := a.db.(type) {
	case *sql.DB:
		return core.WeakKey(h)
	case *sql.Conn:
		return core.WeakKey(h)
	}
	return nil
}

func (a *sqlAdapter) OnCollect(f func()) {
	switch h := a.db.(type) {
	case *sql.DB:
		core.OnCollect(h, f)
	case *sql.Conn:
		core.OnCollect(h, f)
	}
}

// sqlTx is one database/sql attempt. Its transaction is begun on a context
// that ignores the caller's cancellation (database/sql rolls a transaction
// back when its BeginTx context ends), which the adapter cancels itself to
// bound COMMIT and ROLLBACK.
type sqlTx struct {
	tx     *sql.Tx
	cancel context.CancelFunc
	opts   sql.TxOptions
}

func beginSQL(ctx context.Context, db DB, o core.TxOptions) (core.Tx, error) {
	t := &sqlTx{opts: sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly}}
	var txCtx context.Context
	txCtx, t.cancel = context.WithCancel(context.WithoutCancel(ctx))
	var err error
	if ctx.Done() == nil {
		t.tx, err = db.BeginTx(txCtx, &t.opts)
	} else {
		// BEGIN itself (and the wait for a pooled connection) still
		// honours the caller's cancellation.
		stop := context.AfterFunc(ctx, t.cancel)
		t.tx, err = db.BeginTx(txCtx, &t.opts)
		if !stop() {
			// ctx ended during BEGIN or the wait for a connection; if a
			// transaction began, database/sql is rolling it back.
			if err == nil {
				_ = t.tx.Rollback()
			}
			err = context.Cause(ctx)
		}
	}
	if err != nil {
		t.cancel()
		return nil, err
	}
	return t, nil
}

// bounded runs f (COMMIT or ROLLBACK) and cancels the transaction's context
// if timeout passes first, which makes the driver abandon the statement.
func (t *sqlTx) bounded(timeout time.Duration, f func() error) error {
	timer := time.AfterFunc(timeout, t.cancel)
	err := f()
	timer.Stop()
	t.cancel()
	return err
}

func (t *sqlTx) Commit(_ context.Context, timeout time.Duration) error {
	err := t.bounded(timeout, t.tx.Commit)
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("%w: %w", ErrTxEndedByFn, err)
	}
	return err
}

func (t *sqlTx) Rollback(_ context.Context, timeout time.Duration) error {
	return t.bounded(timeout, t.tx.Rollback)
}

func (t *sqlTx) Exec(ctx context.Context, query string) error {
	_, err := t.tx.ExecContext(ctx, query)
	return err
}

func (t *sqlTx) QueryString(ctx context.Context, query string) (string, bool, error) {
	var s sql.NullString
	err := t.tx.QueryRowContext(ctx, query).Scan(&s)
	return s.String, s.Valid, err
}
