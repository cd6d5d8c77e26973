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
	if db == nil {
		return fmt.Errorf("%w: nil DB", ErrInvalidOption)
	}
	if fn == nil {
		return fmt.Errorf("%w: nil fn", ErrInvalidOption)
	}
	a := core.Adapter{Key: db, Begin: func(ctx context.Context, o core.TxOptions) (core.Tx, error) {
		return beginSQL(ctx, db, o)
	}, NotCommitted: func(err error) bool { return errors.Is(err, ErrTxEndedByFn) }, Scope: func() (any, func(func())) {
		switch h := db.(type) {
		case *sql.DB:
			return core.WeakKey(h)
		case *sql.Conn:
			return core.WeakKey(h)
		}
		return nil, nil
	}}
	return run(ctx, a, func(ctx context.Context, tx core.Tx) error {
		return fn(ctx, tx.Handle().(*sql.Tx))
	}, opts)
}

// sqlTx is one database/sql attempt. Its transaction is begun on a context
// that ignores the caller's cancellation (database/sql rolls a transaction
// back when its BeginTx context ends), which the adapter cancels itself to
// bound COMMIT and ROLLBACK.
type sqlTx struct {
	tx     *sql.Tx
	cancel context.CancelFunc
}

func beginSQL(ctx context.Context, db DB, o core.TxOptions) (core.Tx, error) {
	txCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// BEGIN itself still honours the caller's cancellation.
	stop := context.AfterFunc(ctx, cancel)
	tx, err := db.BeginTx(txCtx, &sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly})
	if !stop() && err == nil {
		// ctx ended during BEGIN: database/sql is rolling the transaction back.
		_ = tx.Rollback()
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &sqlTx{tx: tx, cancel: cancel}, nil
}

// bounded runs f and cancels the transaction's context if ctx's deadline
// passes first, which makes the driver abandon the statement.
func (t *sqlTx) bounded(ctx context.Context, f func() error) error {
	defer t.cancel()
	if d, ok := ctx.Deadline(); ok {
		timer := time.AfterFunc(time.Until(d), t.cancel)
		defer timer.Stop()
	}
	return f()
}

func (t *sqlTx) Commit(ctx context.Context) error {
	err := t.bounded(ctx, t.tx.Commit)
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("%w: %w", ErrTxEndedByFn, err)
	}
	return err
}

func (t *sqlTx) Rollback(ctx context.Context) error { return t.bounded(ctx, t.tx.Rollback) }

func (t *sqlTx) Exec(ctx context.Context, query string) error {
	_, err := t.tx.ExecContext(ctx, query)
	return err
}

func (t *sqlTx) QueryString(ctx context.Context, query string) (string, bool, error) {
	var s sql.NullString
	err := t.tx.QueryRowContext(ctx, query).Scan(&s)
	return s.String, s.Valid, err
}

func (t *sqlTx) Handle() any { return t.tx }
