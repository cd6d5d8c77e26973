package txretry

import (
	"context"
	"sync"
	"sync/atomic"
)

// AfterCommit registers f to run once the transaction that ctx is in has
// committed: the place for the side effects that fn must not have, since fn
// can run several times and its attempts can roll back (a mail, a published
// event, a cache invalidation). Call it inside fn, with the context fn
// received (or one derived from it).
//
// The rules:
//
//   - f runs once, after the call's final COMMIT succeeded, a COMMIT that a
//     verifier found committed included. The hooks run in the order they
//     were registered, on the goroutine that called RunInTx (or Run,
//     pgxretry.RunInTx, an adapter's RunInTx), before that call returns
//     nil, once the transaction's connection and its place in the
//     contention manager have been given back, and after the observers'
//     CallFinished event (which thus times the transaction, not the
//     hooks). Each gets
//     context.WithoutCancel of the call's context: the caller's values,
//     not its cancellation or deadline.
//   - The hooks an attempt registered are dropped when that attempt rolls
//     back or is retried; the next attempt registers its own.
//   - None runs when the call returns an error, ErrCommitUncertain and
//     ErrAlreadyCommitted included. After ErrCommitUncertain the
//     transaction may have committed, and nothing will run its hooks: to
//     settle such commits use a verifier (WithVerify, WithCommitMarker,
//     WithXactStatusVerification), or, where an effect must never be
//     lost, write it to an outbox table in fn and have a worker send it;
//     a hook can then merely wake the worker.
//   - A nested call that joined the outer transaction (same handle, fn's
//     context) registers with the outermost call: its hooks run when the
//     outer transaction commits, and are dropped if it rolls back. A call
//     on another handle inside fn is a transaction of its own: its hooks
//     run when it commits, before it returns to the enclosing fn, even if
//     the enclosing transaction later rolls back. To tie an effect to the
//     enclosing transaction, register it with the enclosing fn's context.
//   - Outside any call (a ctx that no RunInTx handed to fn), f runs at
//     once, with context.WithoutCancel(ctx), as Django's on_commit does
//     outside a transaction: code shared by transactional and other paths
//     can call AfterCommit either way. A nil ctx counts as outside any
//     call (f gets context.Background()). A nil f is ignored.
//   - A registration after the attempt's fn returned (from a goroutine fn
//     left behind) is ignored: it is never run. AfterCommit is safe for
//     concurrent use by the goroutines of one fn.
//
// A panicking hook behaves like a panicking deferred call: the transaction
// stays committed, the remaining hooks still run, and then the panic goes
// on out of RunInTx with its value and the stack of where it happened (if
// several hooks panic, recover sees the last one, as with deferred calls).
// Each hook thus gets its chance, since nothing can be rolled back, and a
// panic is never turned into an error, which would tell the caller that the
// committed transaction failed.
func AfterCommit(ctx context.Context, f func(ctx context.Context)) {
	if f == nil {
		return
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if v, ok := ctx.Value(txCtxKey{}).(*txCtxVal); ok {
		v.self().after.add(f)
		return
	}
	f(context.WithoutCancel(ctx))
}

// attemptHooks are one attempt's AfterCommit hooks. It stays empty (nil)
// until the first registration, so that an attempt without hooks allocates
// nothing for them.
type attemptHooks struct{ p atomic.Pointer[afterCommit] }

// afterCommit holds the hooks registered with an attempt.
type afterCommit struct {
	mu     sync.Mutex
	hooks  []func(context.Context)
	closed bool // fn has returned: later registrations are ignored
}

// noHooks ends the registrations of the attempts that registered none.
var noHooks = &afterCommit{closed: true}

func (h *attemptHooks) add(f func(context.Context)) {
	a := h.p.Load()
	if a == nil {
		h.p.CompareAndSwap(nil, new(afterCommit))
		a = h.p.Load()
	}
	a.mu.Lock()
	if !a.closed {
		a.hooks = append(a.hooks, f)
	}
	a.mu.Unlock()
}

// end ends the registrations once fn has returned, and returns the hooks
// to run if the attempt commits: nil if there are none or fn failed (ok is
// false).
func (h *attemptHooks) end(ok bool) *afterCommit {
	if h.p.CompareAndSwap(nil, noHooks) {
		return nil
	}
	a := h.p.Load()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if !ok {
		return nil
	}
	return a
}

// runAfterCommit runs a committed call's hooks a (nil: none) in order,
// with ctx without its cancellation.
func runAfterCommit(ctx context.Context, a *afterCommit) {
	if a != nil {
		runHooks(context.WithoutCancel(ctx), a.hooks) // closed: no longer written
	}
}

// runHooks runs hooks in order. One that panics (or exits the goroutine)
// does not stop the rest: as with deferred calls, they run while the panic
// goes on, and it goes on afterwards, unrecovered, so that its stack still
// shows where it happened.
func runHooks(ctx context.Context, hooks []func(context.Context)) {
	for len(hooks) > 0 {
		f := hooks[0]
		hooks = hooks[1:]
		func() {
			returned := false
			defer func() {
				if !returned {
					runHooks(ctx, hooks)
				}
			}()
			f(ctx)
			returned = true
		}()
	}
}
