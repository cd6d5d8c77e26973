package txretry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/txretry/txretry/txretry/internal/core"
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
// wait for a pooled connection still end with ctx, at most 2 ms after it
// ended.
func RunInTx(ctx context.Context, db DB, fn func(ctx context.Context, tx *sql.Tx) error, opts ...Option) error {
	if isNil(db) {
		return fmt.Errorf("%w: nil DB", ErrInvalidOption)
	}
	if fn == nil {
		return fmt.Errorf("%w: nil fn", ErrInvalidOption)
	}
	a := newCallState(opts, func(a *sqlAdapter) *runner { return &a.r })
	a.db, a.fn, a.r.a = db, fn, a
	return run(ctx, &a.r, opts)
}

// sqlAdapter adapts database/sql to the engine. It holds all of a call's
// state, the engine's included, so that a call allocates it once.
type sqlAdapter struct {
	r  runner
	db DB
	fn func(ctx context.Context, tx *sql.Tx) error
	tx sqlTx // the running attempt's transaction, reused across attempts
}

func (a *sqlAdapter) Key() any { return a.db }

func (a *sqlAdapter) Begin(ctx context.Context, o core.TxOptions) (core.Tx, error) {
	t := &a.tx
	if t.tx != nil {
		t = new(sqlTx) // a verifier's transaction while the attempt's is open
	}
	return t, t.begin(ctx, a.db, o)
}

func (a *sqlAdapter) Call(ctx context.Context, tx core.Tx) error { return a.fn(ctx, tx.(*sqlTx).tx) }

func (a *sqlAdapter) NotCommitted(err error) bool { return errors.Is(err, ErrTxEndedByFn) }

func (a *sqlAdapter) Check(core.TxOptions) error { return nil }

func (a *sqlAdapter) SingleConn() bool {
	_, ok := a.db.(*sql.Conn)
	return ok
}

func (a *sqlAdapter) PerHandle(m *sync.Map, newV func() any) any {
	switch h := a.db.(type) {
	case *sql.DB:
		return core.PerHandle(m, h, newV)
	case *sql.Conn:
		return core.PerHandle(m, h, newV)
	}
	return nil
}

// sqlTx is one database/sql transaction of the engine's. It is begun on a
// shield: a context that carries the caller's values but not its
// cancellation (database/sql rolls a transaction back when its BeginTx
// context ends), which the adapter cancels itself to abandon BEGIN when the
// caller gives up, and to bound COMMIT and ROLLBACK.
type sqlTx struct {
	tx   *sql.Tx
	sh   *shield
	opts sql.TxOptions
}

func (t *sqlTx) begin(ctx context.Context, db DB, o core.TxOptions) error {
	t.opts = sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly}
	t.sh = getShield(ctx)
	var err error
	if ctx.Done() == nil {
		t.tx, err = db.BeginTx(t.sh.ctx, &t.opts)
	} else {
		// BEGIN itself (and the wait for a pooled connection) still
		// honours the caller's cancellation: a short one by the check
		// after it, a long one by the shield's watch.
		t.sh.watch(ctx)
		t.tx, err = db.BeginTx(t.sh.ctx, &t.opts)
		t.sh.endWatch()
		if ctx.Err() != nil {
			// ctx ended during BEGIN or the wait for a connection. If a
			// transaction began, roll it back (database/sql may already be
			// doing so, if the watch cancelled the shield).
			if err == nil {
				_ = t.tx.Rollback()
			}
			err = context.Cause(ctx)
		}
	}
	if err != nil {
		t.end()
	}
	return err
}

// bounded runs f (COMMIT or ROLLBACK) and cancels the transaction's context
// if timeout passes first, which makes the driver abandon the statement.
func (t *sqlTx) bounded(timeout time.Duration, f func() error) error {
	t.sh.arm(timeout)
	err := f()
	t.end()
	return err
}

// end releases the shield once the transaction is over.
func (t *sqlTx) end() {
	t.sh.release()
	t.tx, t.sh = nil, nil
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
