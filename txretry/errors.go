package txretry

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
)

var (
	// ErrRetriesExhausted is matched (errors.Is) by the error RunInTx returns
	// when the last attempt failed with a retryable error and no further
	// attempt was allowed: the attempt limit, the time budget, the context's
	// deadline or the retry budget. The error is a *RetryError.
	ErrRetriesExhausted = errors.New("txretry: retries exhausted")

	// ErrCommitUncertain is matched (errors.Is) by the error RunInTx returns
	// when COMMIT failed in a way that does not tell whether the server
	// committed, and no verifier established the outcome. fn has then not
	// been run again. The error is a *CommitUncertainError.
	ErrCommitUncertain = errors.New("txretry: commit outcome unknown")

	// ErrInvalidOption is matched by the error RunInTx returns, before any
	// attempt, when an option or argument is invalid.
	ErrInvalidOption = errors.New("txretry: invalid option")

	// ErrAttemptTimeout is matched by the error of an attempt whose
	// per-attempt timeout (WithAttemptTimeout) expired while the caller's
	// context was still live. It is not retried by default; add
	// WithRetryOn(func(err error) bool { return errors.Is(err, ErrAttemptTimeout) })
	// to retry such attempts.
	ErrAttemptTimeout = errors.New("txretry: attempt timed out")

	// ErrTxEndedByFn is returned when fn committed or rolled back the
	// transaction itself; RunInTx owns the end of the transaction.
	ErrTxEndedByFn = errors.New("txretry: fn ended the transaction itself")
)

// RetryError is returned when RunInTx stops retrying before the transaction
// committed: because retries were exhausted (Cause is ErrRetriesExhausted) or
// because the caller's context ended between attempts (Cause is the context's
// error). It matches both Cause and Err with errors.Is and errors.As.
type RetryError struct {
	// Attempts is the number of attempts made, the first included.
	Attempts int
	// Reason says why retrying stopped: "attempt limit", "time budget",
	// "deadline", "retry budget" or "context".
	Reason string
	// Cause is ErrRetriesExhausted or the context's error.
	Cause error
	// Err is the last attempt's error: retryable by the classifier, or the
	// COMMIT error of an uncertain commit that verification found not
	// committed.
	Err error
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("txretry: stopped after %d attempt(s) (%s): %s", e.Attempts, e.Reason, Describe(e.Err))
}

// Unwrap returns Cause and Err.
func (e *RetryError) Unwrap() []error { return []error{e.Cause, e.Err} }

// CommitUncertainError is returned when COMMIT failed without telling whether
// the server committed and verification, if any, did not establish it. It
// matches ErrCommitUncertain, the commit error and the verifier's error, if
// any, with errors.Is and errors.As.
type CommitUncertainError struct {
	// Attempts is the number of attempts made, the first included.
	Attempts int
	// Err is the error COMMIT returned.
	Err error
	// Verifier names the verification that was tried ("callback", "idempotency-key",
	// "xact-status", "commit-marker"), or is empty when none was configured.
	Verifier string
	// VerifyErr is the last error of the verifier, if it ran and failed.
	VerifyErr error
}

func (e *CommitUncertainError) Error() string {
	s := fmt.Sprintf("txretry: commit outcome unknown after %d attempt(s): %s", e.Attempts, Describe(e.Err))
	if e.Verifier == "" {
		return s + "; no verifier configured"
	}
	if e.VerifyErr != nil {
		return s + fmt.Sprintf("; %s verification: %s", e.Verifier, Describe(e.VerifyErr))
	}
	return s + fmt.Sprintf("; %s verification did not decide", e.Verifier)
}

// Is reports whether target is ErrCommitUncertain.
func (e *CommitUncertainError) Is(target error) bool { return target == ErrCommitUncertain }

// Unwrap returns the commit error and the verifier's error.
func (e *CommitUncertainError) Unwrap() []error {
	if e.VerifyErr == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.VerifyErr}
}

// Describe renders an error for logs and messages without row data: an
// error reported by the server is described by its SQLSTATE or MySQL error
// number and Go type only, e.g. "SQLSTATE 40001 (pgconn.PgError)" (server
// messages can quote values, e.g. a duplicate key); any other error
// (network, context, driver) by its text.
//
// txretry's own *RetryError and *CommitUncertainError, anywhere in the tree,
// are described by their messages, which follow the same rule and say why
// the call stopped.
func Describe(err error) string {
	if err == nil {
		return "<nil>"
	}
	if isNil(err) {
		return "<nil>"
	}
	var re *RetryError
	if errors.As(err, &re) && re != nil {
		return re.Error()
	}
	var ue *CommitUncertainError
	if errors.As(err, &ue) && ue != nil {
		return ue.Error()
	}
	if code := pgerr.SQLState(err); code != "" {
		return fmt.Sprintf("SQLSTATE %s (%s)", code, errType(err))
	}
	if n, ok := mysqlerr.Number(err); ok {
		return fmt.Sprintf("MySQL error %d (%s)", n, errType(err))
	}
	return err.Error()
}

// serverErrType names the Go type of the first error in the chain that
// carries a server code.
func serverErrType(err error) string {
	var found error
	walk(err, func(e error) bool {
		if _, ok := e.(interface{ SQLState() string }); ok {
			found = e
			return true
		}
		if _, ok := mysqlerr.Number(e); ok && !isWrapper(e) {
			found = e
			return true
		}
		return false
	})
	if found == nil {
		found = err
	}
	return strings.TrimPrefix(reflect.TypeOf(found).String(), "*")
}

func isWrapper(err error) bool {
	switch err.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		return true
	}
	return false
}

// walk visits err and its tree depth-first until visit returns true.
func walk(err error, visit func(error) bool) bool {
	if err == nil {
		return false
	}
	if visit(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return walk(u.Unwrap(), visit)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if walk(e, visit) {
				return true
			}
		}
	}
	return false
}

// errType is a short, data-free name for err's kind, for events: the type
// of the error carrying a server code if there is one, else the outermost
// type that is not a plain wrapper from fmt or errors.
func errType(err error) string {
	if err == nil {
		return ""
	}
	if errCode(err) != "" {
		return serverErrType(err)
	}
	for {
		switch reflect.TypeOf(err).String() {
		case "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError":
			var next error
			switch u := err.(type) {
			case interface{ Unwrap() error }:
				next = u.Unwrap()
			case interface{ Unwrap() []error }:
				if es := u.Unwrap(); len(es) > 0 {
					next = es[0]
				}
			}
			if next == nil {
				return strings.TrimPrefix(reflect.TypeOf(err).String(), "*")
			}
			err = next
			continue
		}
		return strings.TrimPrefix(reflect.TypeOf(err).String(), "*")
	}
}
