// Package inject holds the fault injection that package txretrytest
// switches on and the engine consults: serialization failures after fn
// returned nil, and COMMITs reported lost. Being internal, nothing outside
// module github.com/txretry/txretry can switch it on.
package inject

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// on is set once anything was injected, process-wide or into a context,
// and stays set: the engine looks further only then, so that a program
// that never uses txretrytest pays one atomic load per attempt.
var on atomic.Bool

// On reports whether any injection was ever set up in the process.
func On() bool { return on.Load() }

// Faults are the faults injected into the calls of a process or a context.
type Faults struct {
	// Conflicts is how many of a call's first attempts fail with a
	// serialization failure after fn returned nil.
	Conflicts int
	// LoseCommit reports a call's first COMMIT lost; Committed says
	// whether the transaction is committed (else rolled back) first.
	LoseCommit, Committed bool
}

var (
	mu     sync.Mutex
	global []*Faults // the process-wide injections in force, latest last
)

// Push puts f in force process-wide until the returned func is called.
func Push(f *Faults) (pop func()) {
	on.Store(true)
	mu.Lock()
	global = append(global, f)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		for i, g := range global {
			if g == f {
				global = append(global[:i], global[i+1:]...)
				return
			}
		}
	}
}

type ctxKey struct{}

// With returns ctx with f in force for the calls made with it; it takes
// precedence over the process-wide injections for the faults it sets.
func With(ctx context.Context, f Faults) context.Context {
	on.Store(true)
	prev, _ := ctx.Value(ctxKey{}).(Faults)
	if f.Conflicts == 0 {
		f.Conflicts = prev.Conflicts
	}
	if !f.LoseCommit {
		f.LoseCommit, f.Committed = prev.LoseCommit, prev.Committed
	}
	return context.WithValue(ctx, ctxKey{}, f)
}

// For returns the faults in force for a call made with ctx: the context's,
// else the process-wide ones (each fault from its latest injection).
func For(ctx context.Context) Faults {
	f, _ := ctx.Value(ctxKey{}).(Faults)
	mu.Lock()
	defer mu.Unlock()
	for i := len(global) - 1; i >= 0; i-- {
		g := global[i]
		if f.Conflicts == 0 {
			f.Conflicts = g.Conflicts
		}
		if !f.LoseCommit && g.LoseCommit {
			f.LoseCommit, f.Committed = true, g.Committed
		}
	}
	return f
}

// ErrInjected is matched by every error this package makes.
var ErrInjected = errors.New("txretrytest: injected")

// ConflictError is an injected serialization failure: SQLSTATE 40001, as
// pgerr reads it.
type ConflictError struct{}

func (*ConflictError) Error() string {
	return "txretrytest: injected serialization failure (SQLSTATE 40001)"
}

// SQLState returns 40001 (serialization_failure).
func (*ConflictError) SQLState() string { return "40001" }

// Is matches ErrInjected.
func (*ConflictError) Is(target error) bool { return target == ErrInjected }

// LostCommitError is an injected loss of the connection during COMMIT. It
// wraps a *net.OpError with net.ErrClosed, as a driver reports a
// connection closed under it.
type LostCommitError struct{ err error }

// NewLostCommit returns a LostCommitError.
func NewLostCommit() *LostCommitError {
	return &LostCommitError{err: &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}}
}

func (e *LostCommitError) Error() string {
	return "txretrytest: injected connection loss during COMMIT: " + e.err.Error()
}

// Unwrap returns the *net.OpError.
func (e *LostCommitError) Unwrap() error { return e.err }

// Is matches ErrInjected.
func (*LostCommitError) Is(target error) bool { return target == ErrInjected }
