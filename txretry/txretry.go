package txretry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/txretry/txretry/txretry/internal/keylock"
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
// another DB has none unless the call names WithContentionKeys, which get a
// manager per handle when db is a pointer.
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

func (a sqlAdapter) Begin(ctx context.Context, o TxOptions) (*sqlTx, error) {
	return beginSQL(ctx, a.db, &sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly})
}

func (a sqlAdapter) Call(ctx context.Context, tx *sqlTx) error { return a.fn(ctx, tx.tx) }

func (a sqlAdapter) Handle() any { return a.db }

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

// sqlTx is one database/sql transaction of the engine's. database/sql rolls
// a transaction back when the context it was begun on ends, and pgx's
// stdlib driver commits under that context, so the transaction is begun on
// a context that carries the caller's values but not its cancellation,
// which the adapter cancels itself: to abandon BEGIN when the caller gives
// up, and to bound COMMIT and ROLLBACK.
type sqlTx struct {
	tx     *sql.Tx
	cancel context.CancelFunc
	locks  *keylock.Locks // WithDatabaseKeyLocks: released once the transaction ended
}

func beginSQL(ctx context.Context, db DB, opts *sql.TxOptions) (*sqlTx, error) {
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// BEGIN itself, and the wait for a pooled connection, still honour
	// the caller's cancellation.
	stop := func() bool { return true }
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, cancel)
	}
	tx, err := db.BeginTx(tctx, opts)
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
	return &sqlTx{tx: tx, cancel: cancel}, nil
}

// bounded runs f (COMMIT or ROLLBACK), cancelling the transaction's context
// if timeout passes first, which makes the driver abandon the statement.
func (t *sqlTx) bounded(timeout time.Duration, f func() error) error {
	timer := time.AfterFunc(timeout, t.cancel)
	err := f()
	timer.Stop()
	t.cancel()
	return err
}

func (t *sqlTx) Commit(ctx context.Context, timeout time.Duration) error {
	err := t.bounded(timeout, t.tx.Commit)
	t.unlock(ctx, timeout)
	switch {
	case errors.Is(err, sql.ErrTxDone):
		// fn committed or rolled back itself: this COMMIT did nothing.
		return NotCommitted(fmt.Errorf("%w: %w", ErrTxEndedByFn, err))
	case walk(err, func(e error) bool { return e.Error() == pgxCommitRollbackMsg }):
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

func (t *sqlTx) Rollback(ctx context.Context, timeout time.Duration) error {
	err := t.bounded(timeout, t.tx.Rollback)
	t.unlock(ctx, timeout)
	return err
}

// unlock releases the attempt's database locks, once. A release that finds
// them gone does not change the transaction's outcome: the session check
// after BEGIN is where a pooler shows.
func (t *sqlTx) unlock(ctx context.Context, timeout time.Duration) {
	if t.locks != nil {
		_ = t.locks.Release(ctx, timeout)
		t.locks = nil
	}
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
