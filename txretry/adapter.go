package txretry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// TxOptions are the transaction options the engine asks an Adapter for,
// resolved from WithIsolation, WithReadOnly and WithLockTimeout. Default:
// the zero value (the database's default isolation level, read-write, no
// lock timeout).
type TxOptions struct {
	Isolation sql.IsolationLevel
	ReadOnly  bool
	// LockTimeout, when positive, asks for every single lock wait in the
	// transaction to end after it, with an error that
	// pgerr.IsLockTimeout reports (PostgreSQL: SET LOCAL lock_timeout,
	// rounded up to whole milliseconds). The engine sets it on attempts
	// of SERIALIZABLE and REPEATABLE READ transactions under
	// WithLockTimeout, or when the handle's contention manager armed it,
	// doubled for each earlier attempt of the call that it ended;
	// CheckTxOptions sees the option's value. An adapter whose
	// database finds deadlocks as they form (MySQL, MariaDB) may ignore
	// it; one that cannot honour it on a database that does not should
	// reject it in CheckTxOptions.
	LockTimeout time.Duration
}

// Tx is one attempt's transaction as the engine sees it; Run ends it with
// Commit or Rollback. It may also be a TxQueryString.
type Tx interface {
	// Commit commits within timeout (WithCommitTimeout). ctx carries the
	// caller's values; COMMIT must not observe its cancellation, since a
	// cancelled COMMIT is an uncertain one. An error that proves nothing
	// was committed should be wrapped with NotCommitted.
	Commit(ctx context.Context, timeout time.Duration) error
	// Rollback rolls back within timeout, like Commit; its error is
	// ignored (the attempt's own error is what the caller needs).
	Rollback(ctx context.Context, timeout time.Duration) error
	// Exec runs a statement without arguments (WithCommitMarker's insert;
	// the statement holds no user data).
	Exec(ctx context.Context, query string) error
}

// Adapter plugs a transaction type T into the engine (see Run). It is one
// call's: it typically holds the database handle and the caller's function.
//
// Run finds what else an Adapter does by type assertion, each interface
// with a default when absent: AdapterHandle, AdapterContentionManager,
// AdapterSingleConn, AdapterCheckTxOptions, AdapterLease
// and AdapterFunc; T may be a TxQueryString.
type Adapter[T Tx] interface {
	// Begin starts one attempt's transaction. ctx is the caller's: BEGIN
	// must end with it, the transaction must not (Run commits after ctx
	// ended if fn had returned nil). The verifiers call Begin too, for
	// their probes.
	Begin(ctx context.Context, opts TxOptions) (T, error)
	// Call runs the caller's function on the attempt's transaction, with
	// the context it must hand that function.
	Call(ctx context.Context, tx T) error
}

// TxQueryString is a Tx that runs a query returning one row of one text
// column (valid is false for NULL), as WithXactStatusVerification needs;
// without it a call with that option fails with ErrInvalidOption.
type TxQueryString interface {
	QueryString(ctx context.Context, query string) (s string, valid bool, err error)
}

// AdapterHandle is an Adapter that identifies its database handle
// (comparable, typically a pointer; nil makes Run return ErrInvalidOption):
// a Run inside another's fn, with the context fn received and an equal
// Handle, joins the outer transaction instead of beginning one, and the
// handle keys its default ContentionManager (see ManagerFor). Without it
// calls never join and get no default manager.
type AdapterHandle interface {
	Handle() any
}

// AdapterContentionManager is an Adapter that returns its handle's default
// ContentionManager, nil for none. Without it the default is
// ManagerFor(Handle()).
type AdapterContentionManager interface {
	ContentionManager() *ContentionManager
}

// AdapterSingleConn is an Adapter that reports a handle of one connection,
// which a lost COMMIT takes with it, so that the built-in verifiers report
// the commit uncertain at once instead of waiting for a connection that
// cannot come, and WithRetryOnConnectionLoss does not retry on it. Without
// it the handle counts as a pool.
type AdapterSingleConn interface {
	SingleConn() bool
}

// AdapterCheckTxOptions is an Adapter that rejects, before any attempt,
// the options it cannot honour; Run returns its error. Without it all
// options are accepted.
type AdapterCheckTxOptions interface {
	CheckTxOptions(TxOptions) error
}

// AdapterLease is an Adapter that can hold a database lock for its
// contention manager: the processes whose attempts of one domain conflict
// with each other take turns on the domain through it (see
// ContentionManager). Without it they are only paced.
type AdapterLease interface {
	// Lease takes the exclusive database lock named by key, on a
	// connection that it keeps from the handle's pool until release is
	// called, waiting no longer than ctx; the lock must not outlive
	// release on a session that a pooler lends to others (the built-in
	// adapters hold it in a transaction of its own). It returns an error
	// at once when it cannot (an unknown driver, a handle of one
	// connection, a pool whose leases would hold its last connection); a
	// pool with none free is waited for. release gives the
	// lock and the connection back; it does not block longer than a
	// statement.
	Lease(ctx context.Context, key string) (release func(), err error)
}

// AdapterOverlapCommit is an AdapterLease whose database lets a
// transaction wait for the row locks of another that is committing, and
// go on once that COMMIT lands, instead of failing: MySQL's and MariaDB's
// InnoDB, where a leased domain's next attempt then begins as soon as an
// attempt has sent COMMIT (see ContentionManager). Not PostgreSQL, whose
// SERIALIZABLE and REPEATABLE READ fail such a transaction with 40001.
// Without it the next attempt waits for COMMIT's reply.
type AdapterOverlapCommit interface {
	OverlapCommit() bool
}

// AdapterFunc is an Adapter that returns the caller's function (the fn
// given to RunInTx, pgxretry.RunInTx or the adapter's own Run), itself and
// not a wrapper: the function's name keys the call's conflict domain in
// the contention manager when neither WithConflictDomain nor WithLabel
// names one (see ContentionManager). Without it all calls on a handle
// share one domain.
type AdapterFunc interface {
	Func() any
}

// ErrNotCommitted marks a COMMIT error that proves nothing was committed,
// so that Run treats it like any other error of the attempt (retried if
// the classifier says so) instead of as an uncertain commit. Adapters mark
// errors with NotCommitted.
var ErrNotCommitted = errors.New("txretry: not committed")

// NotCommitted returns err marked as proving that nothing was committed: it
// reads like err and matches both err and ErrNotCommitted. nil stays nil. A
// Tx's Commit uses it for what only its driver knows, such as pgx's
// ErrTxCommitRollback; the engine knows the rest (see the package
// documentation).
func NotCommitted(err error) error {
	if err == nil {
		return nil
	}
	return notCommittedError{err}
}

type notCommittedError struct{ err error }

func (e notCommittedError) Error() string   { return e.err.Error() }
func (e notCommittedError) Unwrap() []error { return []error{e.err, ErrNotCommitted} }

// Run runs a's function in a transaction of a's and commits it, re-running
// the whole transaction on serialization failures and deadlocks, with the
// semantics and options of RunInTx; RunInTx and pgxretry.RunInTx are built
// on it. A nil a returns ErrInvalidOption.
func Run[T Tx](ctx context.Context, a Adapter[T], opts ...Option) error {
	if isNil(a) {
		return fmt.Errorf("%w: nil Adapter", ErrInvalidOption)
	}
	return enter(ctx, typed[T]{a}, opts)
}

// adapter is an Adapter[T] with T erased, which the engine runs.
type adapter interface {
	begin(ctx context.Context, opts TxOptions) (Tx, error)
	call(ctx context.Context, tx Tx) error
	// join runs the function on an enclosing call's transaction.
	join(ctx context.Context, tx Tx) error
	handle() (h any, ok bool) // ok: the adapter is an AdapterHandle
	manager() (*ContentionManager, bool)
	singleConn() bool
	check(TxOptions) error
	// fn is the caller's function (AdapterFunc), nil when unknown.
	fn() any
	// leaser is the adapter as an AdapterLease, nil when it is none.
	leaser() AdapterLease
}

type typed[T Tx] struct{ a Adapter[T] }

func (t typed[T]) begin(ctx context.Context, opts TxOptions) (Tx, error) {
	tx, err := t.a.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	if isNil(tx) {
		return nil, fmt.Errorf("%w: %T.Begin returned a nil transaction", ErrInvalidOption, t.a)
	}
	return tx, nil
}

func (t typed[T]) call(ctx context.Context, tx Tx) error { return t.a.Call(ctx, tx.(T)) }

func (t typed[T]) join(ctx context.Context, tx Tx) error {
	own, ok := tx.(T)
	if !ok {
		own, ok = asSQLTx[T](tx)
	}
	if !ok {
		return fmt.Errorf("%w: a nested call on the same handle wants a %T, the enclosing call's transaction is a %T", ErrInvalidOption, own, tx)
	}
	return t.a.Call(ctx, own)
}

// asSQLTx gives a call whose transaction is a *SQLTx[*sql.Tx] (RunInTx's,
// gormretry's) the *sql.Tx under another library's transaction on the
// same handle (sqlxretry's, bunretry's), which it joins.
func asSQLTx[T Tx](tx Tx) (T, bool) {
	var own T
	if _, ok := any(own).(*SQLTx[*sql.Tx]); !ok {
		return own, false
	}
	s, ok := tx.(interface{ sqlTx() *sql.Tx })
	if !ok || s.sqlTx() == nil {
		return own, false
	}
	own, ok = any(&SQLTx[*sql.Tx]{Tx: s.sqlTx()}).(T)
	return own, ok
}

func (t typed[T]) handle() (any, bool) {
	if h, ok := t.a.(AdapterHandle); ok {
		return h.Handle(), true
	}
	return nil, false
}

func (t typed[T]) manager() (*ContentionManager, bool) {
	if m, ok := t.a.(AdapterContentionManager); ok {
		return m.ContentionManager(), true
	}
	return nil, false
}

func (t typed[T]) singleConn() bool {
	s, ok := t.a.(AdapterSingleConn)
	return ok && s.SingleConn()
}

func (t typed[T]) check(o TxOptions) error {
	if c, ok := t.a.(AdapterCheckTxOptions); ok {
		return c.CheckTxOptions(o)
	}
	return nil
}

func (t typed[T]) leaser() AdapterLease {
	if l, ok := t.a.(AdapterLease); ok && !t.singleConn() {
		return l
	}
	return nil
}

func (t typed[T]) fn() any {
	if f, ok := t.a.(AdapterFunc); ok {
		return f.Func()
	}
	return nil
}
