// Package core is the seam between package txretry, which owns the retry
// engine and its options, and the driver adapters (package txretry for
// database/sql, package pgxretry for pgx): an adapter describes how to begin,
// commit and roll back one attempt, and the engine does everything else.
package core

import (
	"context"
	"database/sql"
	"runtime"
	"weak"
)

// TxOptions are the transaction options both adapters understand.
type TxOptions struct {
	Isolation sql.IsolationLevel
	ReadOnly  bool
}

// Tx is one attempt's transaction as the engine sees it.
type Tx interface {
	// Commit commits. ctx is not the caller's context: the engine bounds it
	// with the commit timeout and shields it from the caller's cancellation.
	Commit(ctx context.Context) error
	// Rollback rolls back; errors are ignored by the engine except for logging.
	Rollback(ctx context.Context) error
	// Exec runs a statement without arguments inside the transaction (used by
	// the commit-marker verifier; the statement contains no user data).
	Exec(ctx context.Context, query string) error
	// QueryString runs a query that returns one row with one text column,
	// which may be NULL (valid=false).
	QueryString(ctx context.Context, query string) (s string, valid bool, err error)
	// Handle is the driver's own transaction object (*sql.Tx, pgx.Tx) handed
	// to the caller's function.
	Handle() any
}

// Begin starts one attempt's transaction. ctx is the caller's context: the
// adapter must not bind the transaction's life to it beyond BEGIN itself.
type Begin func(ctx context.Context, opts TxOptions) (Tx, error)

// Adapter is what a driver adapter gives the engine for one call.
type Adapter struct {
	// Key identifies the database handle, so that a nested call on the same
	// handle joins the outer transaction. It must be comparable or nil.
	Key any
	// Begin starts a transaction.
	Begin Begin
	// NotCommitted reports commit errors that this driver proves left nothing
	// committed, beyond the engine's own driver-independent rules. May be nil.
	NotCommitted func(err error) bool
	// Scope returns the handle's weak key and cleanup registration (see
	// WeakKey), or a nil key if the handle has no default per-handle state.
	// May be nil.
	Scope func() (key any, onCollect func(f func()))
}

// Run is set by package txretry at init: it runs call in transactions begun by
// a, retrying as the options say. opts must be a []txretry.Option.
var Run func(ctx context.Context, a Adapter, call func(ctx context.Context, tx Tx) error, opts any) error

// WeakKey returns a comparable key for the handle p that does not keep it
// alive, and a function that registers f to run once p has been garbage
// collected. Adapters use it to scope per-handle state such as the default
// contention manager.
func WeakKey[T any](p *T) (key any, onCollect func(f func())) {
	return weak.Make(p), func(f func()) {
		runtime.AddCleanup(p, func(f func()) { f() }, f)
	}
}
