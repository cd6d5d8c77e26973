// Package core is the seam between package txretry, which owns the retry
// engine and its options, and the driver adapters (package txretry for
// database/sql, package pgxretry for pgx): an adapter describes how to begin,
// commit and roll back one attempt, and the engine does everything else.
package core

import (
	"context"
	"database/sql"
	"reflect"
	"runtime"
	"sync"
	"time"
	"unsafe"
	"weak"
)

// TxOptions are the transaction options both adapters understand.
type TxOptions struct {
	Isolation sql.IsolationLevel
	ReadOnly  bool
}

// Tx is one attempt's transaction as the engine sees it.
type Tx interface {
	// Commit commits within timeout. ctx is the caller's context, for its
	// values only: COMMIT must not observe its cancellation.
	Commit(ctx context.Context, timeout time.Duration) error
	// Rollback rolls back within timeout, like Commit; the engine ignores
	// its error (the attempt's own error is what the caller needs).
	Rollback(ctx context.Context, timeout time.Duration) error
	// Exec runs a statement without arguments inside the transaction (used by
	// the commit-marker verifier; the statement contains no user data).
	Exec(ctx context.Context, query string) error
	// QueryString runs a query that returns one row with one text column,
	// which may be NULL (valid=false).
	QueryString(ctx context.Context, query string) (s string, valid bool, err error)
}

// Adapter is what a driver adapter gives the engine for one call.
type Adapter interface {
	// Key identifies the database handle, so that a nested call on the same
	// handle joins the outer transaction. It must be comparable or nil.
	Key() any
	// Begin starts one attempt's transaction. ctx is the caller's context:
	// the adapter must not bind the transaction's life to it beyond BEGIN.
	Begin(ctx context.Context, opts TxOptions) (Tx, error)
	// Call runs the caller's function on the attempt's transaction.
	Call(ctx context.Context, tx Tx) error
	// NotCommitted reports commit errors that this driver proves left
	// nothing committed, beyond the engine's own driver-independent rules.
	NotCommitted(err error) bool
	// PerHandle returns the value m holds for the handle (see PerHandle),
	// or nil if the handle has no default per-handle state.
	PerHandle(m *sync.Map, newV func() any) any
	// Check rejects transaction options the driver cannot honour, before
	// any attempt.
	Check(opts TxOptions) error
	// SingleConn reports a handle of one connection (*sql.Conn, *pgx.Conn):
	// once that connection is lost, a verifier cannot use it.
	SingleConn() bool
}

// Run is set by package txretry at init: it runs a call through the engine.
// opts must be a []txretry.Option.
var Run func(ctx context.Context, a Adapter, opts any) error

// IsNil reports a nil interface or an interface holding a nil pointer,
// func, map, slice or channel: a typed nil that would panic on first use.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// PerHandle returns the value m holds for the handle p, storing newV() on
// first use. m does not keep p alive, and p's entry is deleted once p has
// been garbage collected.
//
// m is keyed by p's address, a number, and each entry holds a weak pointer
// to its handle, which tells p from a collected handle that had the same
// address and whose entry is not deleted yet. Looking up an address costs
// far less than weak.Make, which searches the handle's memory span.
func PerHandle[T any](m *sync.Map, p *T, newV func() any) any {
	addr := uintptr(unsafe.Pointer(p))
	if v, ok := live(m, addr, p); ok {
		return v
	}
	e := &handleEntry[T]{handle: weak.Make(p), v: newV()}
	for {
		old, loaded := m.LoadOrStore(addr, e)
		if !loaded {
			break
		}
		if v, ok := live(m, addr, p); ok {
			return v
		}
		if m.CompareAndSwap(addr, old, e) { // old's handle was collected
			break
		}
	}
	runtime.AddCleanup(p, func(e any) { m.CompareAndDelete(addr, e) }, any(e))
	return e.v
}

type handleEntry[T any] struct {
	handle weak.Pointer[T]
	v      any
}

// live returns the value of m's entry at addr if the entry is p's.
func live[T any](m *sync.Map, addr uintptr, p *T) (any, bool) {
	if e, ok := m.Load(addr); ok {
		if e, ok := e.(*handleEntry[T]); ok && e.handle.Value() == p {
			return e.v, true
		}
	}
	return nil, false
}
