package txretry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
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
// begun on a context that does not carry ctx's cancellation; BEGIN and the
// wait for a pooled connection still end with ctx.
//
// A *sql.DB or *sql.Conn has a default ContentionManager (see ManagerFor);
// another DB has none.
func RunInTx(ctx context.Context, db DB, fn func(ctx context.Context, tx *sql.Tx) error, opts ...Option) error {
	if isNil(db) {
		return fmt.Errorf("%w: nil DB", ErrInvalidOption)
	}
	if fn == nil {
		return fmt.Errorf("%w: nil fn", ErrInvalidOption)
	}
	return Run(ctx, sqlAdapter{db: db, fn: fn}, opts...)
}

// sqlAdapter runs database/sql transactions in the engine.
type sqlAdapter struct {
	db DB
	fn func(ctx context.Context, tx *sql.Tx) error
}

var (
	_ AdapterHandle            = sqlAdapter{}
	_ AdapterContentionManager = sqlAdapter{}
	_ AdapterSingleConn        = sqlAdapter{}
	_ AdapterCheckTxOptions    = sqlAdapter{}
	_ AdapterFunc              = sqlAdapter{}
	_ AdapterLease             = sqlAdapter{}
	_ AdapterOverlapCommit     = sqlAdapter{}
	_ TxQueryString            = (*SQLTx[*sql.Tx])(nil)
)

func (a sqlAdapter) Begin(ctx context.Context, o TxOptions) (*SQLTx[*sql.Tx], error) {
	return BeginSQLOn(ctx, a.db, o, func(ctx context.Context) (*sql.Tx, error) {
		return a.db.BeginTx(ctx, &sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly})
	})
}

func (a sqlAdapter) Call(ctx context.Context, tx *SQLTx[*sql.Tx]) error { return a.fn(ctx, tx.Tx) }

func (a sqlAdapter) Handle() any { return a.db }

// Func is the caller's fn.
func (a sqlAdapter) Func() any { return a.fn }

func (a sqlAdapter) ContentionManager() *ContentionManager {
	switch a.db.(type) {
	case *sql.DB, *sql.Conn:
		return ManagerFor(a.db)
	}
	return nil
}

func (a sqlAdapter) SingleConn() bool {
	_, ok := a.db.(*sql.Conn)
	return ok
}

// SQLTransaction is what SQLTx needs of a transaction built on
// database/sql: *sql.Tx has it, and so do sqlx's *sqlx.Tx and bun's bun.Tx.
type SQLTransaction interface {
	Commit() error
	Rollback() error
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQLTx is one attempt's transaction for adapters of libraries built on
// database/sql (RunInTx's own, sqlx, bun): a Tx, with QueryString, over the
// library's transaction T, which the adapter's Call hands to the caller's
// function. Begin it with BeginSQL, or BeginSQLOn, which also applies
// the lock timeout.
//
// database/sql rolls a transaction back when the context it was begun on
// ends, and pgx's stdlib driver commits under that context, so BeginSQL
// begins it on a context that carries the caller's values but not its
// cancellation, which SQLTx cancels itself: to abandon BEGIN when the
// caller gives up, and to bound COMMIT and ROLLBACK by their timeout.
type SQLTx[T SQLTransaction] struct {
	Tx     T
	cancel context.CancelFunc
	driver sqlDriver // BeginSQLOn's db's; BeginSQL's are sqlDriverOther
}

// BeginSQL begins a transaction with begin, which must begin it on the
// context it is given (as db.BeginTx(ctx, opts) does). BEGIN, and the wait
// for a pooled connection, end with ctx; the transaction does not.
func BeginSQL[T SQLTransaction](ctx context.Context, begin func(ctx context.Context) (T, error)) (*SQLTx[T], error) {
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := func() bool { return true }
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, cancel)
	}
	tx, err := begin(tctx)
	if !stop() || ctx.Err() != nil {
		// ctx ended during BEGIN or the wait for a connection. If a
		// transaction began, roll it back (database/sql may already be
		// doing so, having seen the cancellation).
		if err == nil {
			_ = tx.Rollback()
		}
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &SQLTx[T]{Tx: tx, cancel: cancel}, nil
}

// bounded runs f (COMMIT or ROLLBACK), cancelling the transaction's context
// if timeout passes first, which makes the driver abandon the statement.
func (t *SQLTx[T]) bounded(timeout time.Duration, f func() error) error {
	timer := time.AfterFunc(timeout, t.cancel)
	err := f()
	timer.Stop()
	t.cancel()
	return err
}

// Commit commits within timeout. An error that proves nothing was
// committed is marked with NotCommitted: sql.ErrTxDone (fn ended the
// transaction itself, reported as ErrTxEndedByFn), pgx's
// ErrTxCommitRollback through its stdlib driver, and, on a transaction
// begun with BeginSQLOn, what the driver of its db proves (see the package
// documentation): driver.ErrBadConn from go-sql-driver/mysql or pgx's
// stdlib, lib/pq's ErrInFailedTransaction. Any other driver.ErrBadConn is
// uncertain, lib/pq's included.
func (t *SQLTx[T]) Commit(ctx context.Context, timeout time.Duration) error {
	err := t.bounded(timeout, t.Tx.Commit)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrTxDone):
		return NotCommitted(fmt.Errorf("%w: %w", ErrTxEndedByFn, err))
	case walk(err, func(e error) bool { return e.Error() == pgxCommitRollbackMsg }), t.driver.provenNotCommitted(err):
		return NotCommitted(err)
	}
	return err
}

// pgxCommitRollbackMsg is the text of pgx.ErrTxCommitRollback, which pgx's
// stdlib driver returns when the server answered COMMIT with ROLLBACK
// because the transaction had failed. Matched by text so that the
// database/sql adapter does not import pgx; tests pin it to pgx's value and
// to what a real server gives through the stdlib driver.
const pgxCommitRollbackMsg = "commit unexpectedly resulted in rollback"

// Rollback rolls back within timeout.
func (t *SQLTx[T]) Rollback(ctx context.Context, timeout time.Duration) error {
	err := t.bounded(timeout, t.Tx.Rollback)
	return err
}

// Exec runs query, which has no arguments.
func (t *SQLTx[T]) Exec(ctx context.Context, query string) error {
	_, err := t.Tx.ExecContext(ctx, query)
	return err
}

// QueryString runs query, which returns one row of one text column; valid
// is false for NULL.
func (t *SQLTx[T]) QueryString(ctx context.Context, query string) (s string, valid bool, err error) {
	var ns sql.NullString
	err = t.Tx.QueryRowContext(ctx, query).Scan(&ns)
	return ns.String, ns.Valid, err
}
