package pgerr

import (
	"reflect"
	"slices"
)

// SQLSTATE codes used by this package and by the transaction engine. See the
// package documentation for the table of classes and sources.
const (
	// SerializationFailure (40001, serialization_failure) means the
	// transaction could not be serialized with concurrent transactions and
	// was aborted. PostgreSQL, CockroachDB and YugabyteDB all use it.
	// Retried by default. Source: PostgreSQL Appendix A; "Serialization
	// Failure Handling"; CockroachDB "Transaction Retry Error Reference";
	// YugabyteDB "Transaction error codes in YSQL".
	SerializationFailure = "40001"

	// DeadlockDetected (40P01, deadlock_detected) means the transaction was
	// the victim of a deadlock and was aborted. Retried by default. Source:
	// PostgreSQL Appendix A; "Serialization Failure Handling"; YugabyteDB
	// "Transaction error codes in YSQL".
	DeadlockDetected = "40P01"

	// UniqueViolation (23505, unique_violation): a unique constraint was
	// violated. Opt-in, see [IsUniqueViolation]. Source: PostgreSQL
	// Appendix A; "Serialization Failure Handling".
	UniqueViolation = "23505"

	// ExclusionViolation (23P01, exclusion_violation): an exclusion
	// constraint was violated. Opt-in, see [IsUniqueViolation]. Source:
	// PostgreSQL Appendix A; "Serialization Failure Handling".
	ExclusionViolation = "23P01"

	// LockNotAvailable (55P03, lock_not_available): a lock could not be
	// taken because of NOWAIT or lock_timeout. Opt-in, see
	// [IsLockNotAvailable]. Source: PostgreSQL Appendix A.
	LockNotAvailable = "55P03"

	// CockroachRetryLegacy (CR000) is the retry code of old CockroachDB
	// versions (RetriableError); current versions send 40001. Opt-in, see
	// [IsCockroachRetryLegacy]. Source: cockroach-go, package crdb.
	CockroachRetryLegacy = "CR000"

	// StatementCompletionUnknown (40003, statement_completion_unknown): the
	// server does not know whether the statement completed; CockroachDB
	// reports ambiguous commits with it. Uncertain, see [IsAmbiguousCommit].
	// Source: PostgreSQL Appendix A; CockroachDB "Transactions".
	StatementCompletionUnknown = "40003"

	// TransactionResolutionUnknown (08007, transaction_resolution_unknown):
	// the connection failed while the transaction was being resolved.
	// Uncertain, see [IsAmbiguousCommit]. Source: PostgreSQL Appendix A.
	TransactionResolutionUnknown = "08007"

	// QueryCanceled (57014, query_canceled): the statement was cancelled,
	// for example by statement_timeout or a cancel request. Not classified
	// here; at COMMIT the engine treats it as uncertain. Source: PostgreSQL
	// Appendix A.
	QueryCanceled = "57014"

	// AdminShutdown (57P01, admin_shutdown): the server is shutting down or
	// the backend was terminated. Opt-in, see [IsConnectionLoss]; at COMMIT the
	// engine treats it as uncertain. Source: PostgreSQL Appendix A.
	AdminShutdown = "57P01"

	// CrashShutdown (57P02, crash_shutdown): the server is restarting after
	// another backend crashed. Opt-in, see [IsConnectionLoss]; at COMMIT the
	// engine treats it as uncertain. Source: PostgreSQL Appendix A.
	CrashShutdown = "57P02"

	// CannotConnectNow (57P03, cannot_connect_now): the server is starting
	// up, shutting down or in recovery. Opt-in, see [IsConnectionLoss]; at COMMIT
	// the engine treats it as uncertain. Source: PostgreSQL Appendix A.
	CannotConnectNow = "57P03"
)

// sqlStater is the method shared by pgx's *pgconn.PgError, lib/pq's
// *pq.Error and other PostgreSQL-protocol driver errors.
type sqlStater interface {
	SQLState() string
}

// SQLState returns the SQLSTATE of the first error in err's tree that
// reports a non-empty one, walking depth-first in Unwrap order. It returns
// "" if err is nil or no error in the tree has a SQLSTATE.
func SQLState(err error) string {
	var first string
	walk(err, func(code string) bool {
		first = code
		return true
	})
	return first
}

// Has reports whether any error in err's tree reports one of codes. It
// returns false if err is nil or codes is empty. Codes are compared exactly
// (SQLSTATE codes are upper case).
func Has(err error, codes ...string) bool {
	if len(codes) == 0 {
		return false
	}
	return walk(err, func(code string) bool {
		return slices.Contains(codes, code)
	})
}

// IsSerializationFailure reports whether err's tree holds a serialization
// failure (40001).
func IsSerializationFailure(err error) bool {
	return Has(err, SerializationFailure)
}

// IsDeadlock reports whether err's tree holds a deadlock error (40P01).
func IsDeadlock(err error) bool {
	return Has(err, DeadlockDetected)
}

// IsRetryable is the default retry class: it reports whether err's tree
// holds a serialization failure (40001) or a deadlock (40P01). In both cases
// the server has aborted the transaction and running the whole transaction
// again may succeed. This also covers CockroachDB and YugabyteDB, which
// report their retry errors as 40001 (and YugabyteDB its deadlocks as 40P01).
func IsRetryable(err error) bool {
	return Has(err, SerializationFailure, DeadlockDetected)
}

// IsUniqueViolation is an opt-in class: it reports whether err's tree holds
// a unique violation (23505) or an exclusion violation (23P01).
//
// PostgreSQL's manual ("Serialization Failure Handling") says that in some
// cases such a violation is caused by a concurrent transaction (for example,
// both chose the same new key after reading the existing ones) and is in
// effect a serialization failure, so retrying may succeed. But it may as well
// be a genuine duplicate that fails on every attempt, which is why it is not
// retried by default. Use it only when the transaction derives its keys from
// what it read, and keep the attempt limit low.
func IsUniqueViolation(err error) bool {
	return Has(err, UniqueViolation, ExclusionViolation)
}

// IsLockNotAvailable is an opt-in class: it reports whether err's tree holds
// lock_not_available (55P03), raised by NOWAIT or when lock_timeout expires.
// txretry.WithLockTimeout retries the lock timeouts it sets without it (see
// [IsLockTimeout]); this class is for lock timeouts set elsewhere, such as
// in a DSN.
func IsLockNotAvailable(err error) bool {
	return Has(err, LockNotAvailable)
}

// IsConnectionLoss is an opt-in class: it reports whether err's tree holds
// a connection exception (class 08) or admin_shutdown (57P01),
// crash_shutdown (57P02) or cannot_connect_now (57P03): the server is going
// away, starting up, or the session ended, and with it any transaction it
// had not committed. Retrying is safe only for errors outside COMMIT: at
// COMMIT these codes leave the outcome unknown (txretry treats them as
// uncertain; txretry.WithRetryOnConnectionLoss retries them elsewhere).
// Network errors without a SQLSTATE are not seen here.
func IsConnectionLoss(err error) bool {
	return walk(err, func(code string) bool {
		return len(code) == 5 && code[:2] == "08" || code == AdminShutdown || code == CrashShutdown || code == CannotConnectNow
	})
}

// IsLockTimeout reports whether err's tree holds lock_not_available
// (55P03) raised because lock_timeout ran out, as opposed to NOWAIT, which
// raises the same code when a lock is not free at once. PostgreSQL raises the former in its routine ProcessInterrupts and
// reports the routine with the error; pgx's *pgconn.PgError and lib/pq's
// *pq.Error carry it in their Routine field, which is read here. An error
// without that field is never a lock timeout for this function.
// txretry.WithLockTimeout retries it.
func IsLockTimeout(err error) bool {
	found := false
	walkNodes(err, func(node error, code string) bool {
		found = code == LockNotAvailable && routine(node) == "ProcessInterrupts"
		return found
	})
	return found
}

// routine returns the Routine string field of the struct that err is or
// points to, "" if it has none.
func routine(err error) string {
	v := reflect.ValueOf(err)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return ""
	}
	if f := v.FieldByName("Routine"); f.IsValid() && f.Kind() == reflect.String {
		return f.String()
	}
	return ""
}

// IsCockroachRetryLegacy is an opt-in class: it reports whether err's tree
// holds CR000, the retry code of old CockroachDB versions. Current versions
// report retry errors as 40001, which [IsRetryable] accepts.
func IsCockroachRetryLegacy(err error) bool {
	return Has(err, CockroachRetryLegacy)
}

// IsAmbiguousCommit reports whether err's tree holds a code with which the
// server itself says that the outcome of the transaction is unknown:
// statement_completion_unknown (40003, used by CockroachDB for ambiguous
// commits) or transaction_resolution_unknown (08007). Such a transaction may
// have committed; it must not be run again blindly.
func IsAmbiguousCommit(err error) bool {
	return Has(err, StatementCompletionUnknown, TransactionResolutionUnknown)
}

// walk calls visit with the SQLSTATE of every error in err's tree that
// reports a non-empty one, depth-first in Unwrap order, until visit returns
// true. It reports whether visit returned true.
func walk(err error, visit func(code string) bool) bool {
	return walkNodes(err, func(_ error, code string) bool { return visit(code) })
}

// walkNodes is walk that also hands visit the error reporting the code.
func walkNodes(err error, visit func(node error, code string) bool) bool {
	for err != nil {
		if node, code := nodeSQLState(err); code != "" && visit(node, code) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walkNodes(e, visit) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// nodeSQLState returns the SQLSTATE of err itself (not of the errors it
// wraps), and the error reporting it: err, from its SQLState method, or
// else what its As(any) bool method offers, as errors.As would ask a single
// error. The code is "" if there is none.
func nodeSQLState(err error) (node error, code string) {
	defer func() {
		// A nil pointer whose SQLState method reads its receiver (such as a
		// nil *pgconn.PgError inside a wrapper) must not crash the caller's
		// retry loop: such an error simply has no SQLSTATE.
		if recover() != nil {
			node, code = nil, ""
		}
	}()
	if s, ok := err.(sqlStater); ok {
		return err, s.SQLState()
	}
	if a, ok := err.(interface{ As(any) bool }); ok {
		// An unnamed interface type, so that an As method written
		// against the same method set (not only by reflection) can match.
		var target interface{ SQLState() string }
		if a.As(&target) && target != nil {
			if e, ok := target.(error); ok {
				node = e
			}
			return node, target.SQLState()
		}
	}
	return nil, ""
}
