package txretry

import (
	"context"
	"strconv"
	"time"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
)

// Observer receives events about a call's attempts. Observe is called
// synchronously on the calling goroutine, never while waiting between
// attempts; it must be quick and safe for concurrent use. Events carry codes
// and types, never error messages or SQL arguments.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// WithObserver adds an observer of the call's events; every observer added
// gets every event, in the order they were added. Default: none, and a call
// without an observer does no work for events.
func WithObserver(o Observer) Option {
	return func(c *config) {
		if isNil(o) {
			c.fail("WithObserver(nil)")
			return
		}
		c.observers = append(c.observers[:len(c.observers):len(c.observers)], o)
	}
}

// CallStarter is an optional interface of an Observer. StartCall is called
// once per call, before the first attempt, with the caller's context and the
// call's label; the context it returns is the one every event of the call is
// observed with and the parent of the context fn receives. A tracing adapter
// starts its span there, so that the statements fn runs become its children,
// and ends it at CallFinished.
type CallStarter interface {
	StartCall(ctx context.Context, label string) context.Context
}

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of events, in the order a call emits them.
const (
	// AttemptStarted: an attempt begins (Attempt).
	AttemptStarted EventKind = iota + 1
	// AttemptFailed: an attempt failed (Attempt, Class, Code, ErrType, Duration).
	AttemptFailed
	// RetryScheduled: the call will wait Delay, then start attempt Attempt+1.
	RetryScheduled
	// CommitVerified: a verifier ran after an uncertain commit (Verifier,
	// Verification, Code and ErrType of the verifier's error if unresolved).
	CommitVerified
	// CallFinished: the call returns (Outcome, Attempts, Duration, Waited).
	CallFinished
)

var eventKindNames = []string{"", "attempt_started", "attempt_failed", "retry_scheduled", "commit_verified", "call_finished"}

func (k EventKind) String() string { return enumName(eventKindNames, int(k), "EventKind") }

// Class is how an attempt's error was classified.
type Class uint8

const (
	// Permanent errors are returned to the caller as they are.
	Permanent Class = iota + 1
	// Retryable errors re-run the whole transaction.
	Retryable
	// Uncertain errors come from a COMMIT whose outcome is unknown.
	Uncertain
	// ConnectionLost errors broke or refused the connection before COMMIT
	// was sent; WithRetryOnConnectionLoss re-runs the whole transaction.
	ConnectionLost
)

var classNames = []string{"", "permanent", "retryable", "uncertain", "connection_lost"}

func (c Class) String() string { return enumName(classNames, int(c), "Class") }

// Verification is the result of verifying an uncertain commit.
type Verification uint8

const (
	// VerifiedCommitted: the commit happened; the call succeeds.
	VerifiedCommitted Verification = iota + 1
	// VerifiedNotCommitted: the commit did not happen; the call retries.
	VerifiedNotCommitted
	// Unresolved: the verifier could not tell; the call returns ErrCommitUncertain.
	Unresolved
)

var verificationNames = []string{"", "committed", "not_committed", "unresolved"}

func (v Verification) String() string { return enumName(verificationNames, int(v), "Verification") }

// Outcome is how a call ended.
type Outcome uint8

const (
	// Committed: the transaction committed (possibly established by a verifier).
	Committed Outcome = iota + 1
	// PermanentError: fn, BEGIN or COMMIT returned an error that is not retried.
	PermanentError
	// Exhausted: retries ran out (ErrRetriesExhausted).
	Exhausted
	// CommitUncertain: the commit's outcome is unknown (ErrCommitUncertain).
	CommitUncertain
	// Cancelled: the caller's context ended between attempts.
	Cancelled
	// Panicked: fn panicked; the transaction was rolled back and the panic goes on.
	Panicked
	// AlreadyCommitted: the call's idempotency key was found committed
	// by another call (ErrAlreadyCommitted): the last attempt did not run
	// fn, and no earlier one committed.
	AlreadyCommitted
)

var outcomeNames = []string{"", "committed", "permanent_error", "exhausted", "uncertain", "cancelled", "panicked", "already_committed"}

func (o Outcome) String() string { return enumName(outcomeNames, int(o), "Outcome") }

// Event is one observation of a call. Fields not listed for a Kind are zero.
type Event struct {
	Kind  EventKind
	Label string // the call's WithLabel
	// Attempt is the 1-based attempt the event is about.
	Attempt int
	// Class of the failed attempt's error (AttemptFailed).
	Class Class
	// Code is the SQLSTATE ("40001") or MySQL error number ("1213") of the
	// error, or empty when the error carries none.
	Code string
	// ErrType is the Go type of the error (e.g. "pgconn.PgError"); never its message.
	ErrType string
	// Delay before the next attempt (RetryScheduled).
	Delay time.Duration
	// Verifier that ran (CommitVerified): "callback", "xact-status" or "commit-marker".
	Verifier string
	// Verification result (CommitVerified).
	Verification Verification
	// Outcome of the call (CallFinished).
	Outcome Outcome
	// Attempts made in all (CallFinished).
	Attempts int
	// Duration of the attempt (AttemptFailed) or of the whole call (CallFinished).
	Duration time.Duration
	// Waited is the total time spent in backoff waits between attempts
	// (CallFinished).
	Waited time.Duration
	// Queued is the time spent waiting for the contention manager's
	// admission: before this attempt (AttemptStarted), or in all
	// (CallFinished).
	Queued time.Duration
}

// enumName names value v of an enumeration type from its table of names.
func enumName(names []string, v int, typ string) string {
	if v >= 0 && v < len(names) && names[v] != "" {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(v) + ")"
}

// errCode is the SQLSTATE or MySQL error number of err, or "".
func errCode(err error) string {
	if code := pgerr.SQLState(err); code != "" {
		return code
	}
	if n, ok := mysqlerr.Number(err); ok {
		return strconv.Itoa(int(n))
	}
	return ""
}
