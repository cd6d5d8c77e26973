// Package txretrytest makes the retries of txretry happen in tests, on any
// database and adapter, without contention: every transaction's attempts
// fail with a serialization failure after fn returned nil
// (InjectConflicts, WithConflicts), or its first COMMIT is reported lost
// (InjectLostCommits, WithLostCommits). A test that passed because its
// transactions never conflicted then shows what a retry does to them: a
// mail sent, an event published or a counter bumped in fn instead of in
// txretry.AfterCommit happens twice, and a WithVerify callback is called
// both on a commit that happened and on one that did not.
//
//	func TestPlaceOrder(t *testing.T) {
//		txretrytest.InjectConflicts(t, 1) // every transaction below runs twice
//		...
//	}
//
// An injected conflict is handled as a real one: the transaction fn ran in
// is rolled back, the attempt's AfterCommit hooks are dropped, and the
// error, SQLSTATE 40001 (pgerr.IsSerializationFailure), is classified,
// observed (observer events, slogretry, otelretry), counted by the
// contention manager and retried, within WithMaxAttempts and the call's
// deadline, under whatever classifier the call has. An injected lost
// COMMIT is a *net.OpError wrapping net.ErrClosed, as a driver reports a
// connection closed under it, after the transaction was really committed
// or rolled back: the call's verifier settles it, or the call returns
// txretry.ErrCommitUncertain. Injected errors match ErrInjected.
//
// # Which to use
//
// InjectConflicts and InjectLostCommits act on every call of the process,
// whatever context it gets, until the test ends: one line in a test makes
// every transaction of the code under test retry, also those whose context
// the test cannot reach (a server's handlers, a worker's loop). They must
// not overlap with tests that expect other behaviour, so they refuse
// tests that call t.Parallel (as t.Setenv does, which they call).
//
// WithConflicts and WithLostCommits act on the calls made with the
// returned context or one derived from it, and suit parallel tests and
// subtests; in force together with a process-wide injection, a context's
// setting wins for the fault it sets.
//
// A nested call that joins the enclosing transaction is part of that
// transaction's attempt; a call on another handle inside fn is a call of
// its own and gets its own injected faults.
//
// Outside tests this costs a call one atomic load per attempt; only this
// package can switch injection on.
package txretrytest

import (
	"context"
	"fmt"
	"testing"

	"github.com/txretry/txretry/txretry/internal/inject"
)

// ErrInjected is matched (errors.Is) by every error this package injects.
var ErrInjected = inject.ErrInjected

// envInjecting is set by the process-wide injections for their test, so
// that testing refuses them in parallel tests.
const envInjecting = "TXRETRYTEST_INJECTING"

// InjectConflicts makes the first n attempts of every txretry call in the
// process (txretry.RunInTx, txretry.Run, pgxretry and the sqlx, GORM and
// bun adapters) fail with an injected serialization failure (SQLSTATE
// 40001) after fn returned nil, until tb's test and its subtests end: a
// call that commits runs fn at least n+1 times. An attempt that fails by
// itself counts as one of the n. n must be 0 or more; 0 injects nothing.
// It panics if tb's test called t.Parallel (see the package doc).
func InjectConflicts(tb testing.TB, n int) {
	tb.Helper()
	if n < 0 {
		tb.Fatalf("txretrytest.InjectConflicts: n = %d, want 0 or more", n)
		return
	}
	push(tb, &inject.Faults{Conflicts: n}, fmt.Sprintf("conflicts=%d", n))
}

// InjectLostCommits reports the first COMMIT of every txretry call in the
// process lost, as a closed connection, until tb's test and its subtests
// end. The transaction is committed first if committed is true, else
// rolled back: the call's verifier (WithVerify, WithCommitMarker,
// WithXactStatusVerification, WithIdempotencyKey) must then find it
// committed, or not committed and have it retried; without a verifier the
// call returns an error matching txretry.ErrCommitUncertain. It panics if
// tb's test called t.Parallel (see the package doc).
func InjectLostCommits(tb testing.TB, committed bool) {
	tb.Helper()
	push(tb, &inject.Faults{LoseCommit: true, Committed: committed}, fmt.Sprintf("lost-commits committed=%v", committed))
}

func push(tb testing.TB, f *inject.Faults, what string) {
	tb.Setenv(envInjecting, what)
	tb.Cleanup(inject.Push(f))
}

// WithConflicts returns a context with which the first n attempts of every
// txretry call fail with an injected serialization failure after fn
// returned nil, as InjectConflicts does for the whole process. n of 0 or
// less injects none (and lets a process-wide InjectConflicts act). A nil
// ctx counts as context.Background().
func WithConflicts(ctx context.Context, n int) context.Context {
	return inject.With(orBackground(ctx), inject.Faults{Conflicts: max(n, 0)})
}

// WithLostCommits returns a context with which the first COMMIT of every
// txretry call is reported lost after the transaction was committed
// (committed) or rolled back, as InjectLostCommits does for the whole
// process. A nil ctx counts as context.Background().
func WithLostCommits(ctx context.Context, committed bool) context.Context {
	return inject.With(orBackground(ctx), inject.Faults{LoseCommit: true, Committed: committed})
}

func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}
