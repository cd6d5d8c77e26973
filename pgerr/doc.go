// Package pgerr classifies PostgreSQL-protocol errors by their SQLSTATE
// code, so that a caller can decide whether a failed transaction may be run
// again.
//
// It works with any error in the chain that has a method
//
//	SQLState() string
//
// which covers pgx's *pgconn.PgError and lib/pq's *pq.Error, and through them
// CockroachDB and YugabyteDB. The package imports nothing but the standard
// library, so it adds no driver dependency.
//
// # Error trees
//
// Every function looks at the whole error tree: errors wrapped with %w
// (Unwrap() error) and errors joined with [errors.Join] or any other type
// with Unwrap() []error. The tree is walked depth-first in Unwrap order, the
// order that [errors.Is] and [errors.As] use. Unlike a single [errors.As]
// call, which stops at the first error with a SQLSTATE, [Has] and the Is…
// functions look at every error in the tree, so a join of an unrelated
// database error and a serialization failure is still retryable. An error
// with an As(any) bool method is asked for a SQLSTATE error too, as
// [errors.As] would ask it.
//
// # Codes
//
// "default" codes are the ones [IsRetryable] accepts. "opt-in" codes have
// their own func(error) bool that a caller adds on purpose. "uncertain"
// codes ([IsAmbiguousCommit]) mean the server itself does not know the
// outcome of the COMMIT, so the transaction must not be run again blindly.
// "commit check" codes are not classified here: the transaction engine uses
// them to judge that an error seen at COMMIT leaves the outcome uncertain,
// because the server stopped or cancelled work while the COMMIT may already
// have been applied.
//
//	Code   Name                            Class         Source
//	40001  serialization_failure           default       [PG-A], [PG-SFH], [CRDB], [YB]
//	40P01  deadlock_detected               default       [PG-A], [PG-SFH], [YB]
//	23505  unique_violation                opt-in        [PG-A], [PG-SFH]
//	23P01  exclusion_violation             opt-in        [PG-A], [PG-SFH]
//	55P03  lock_not_available              opt-in        [PG-A]
//	CR000  (CockroachDB RetriableError)    opt-in        [CRDB-GO]
//	40003  statement_completion_unknown    uncertain     [PG-A], [CRDB-AMB]
//	08007  transaction_resolution_unknown  uncertain     [PG-A]
//	57014  query_canceled                  commit check  [PG-A]
//	57P01  admin_shutdown                  commit check  [PG-A]
//	57P02  crash_shutdown                  commit check  [PG-A]
//	57P03  cannot_connect_now              commit check  [PG-A]
//
// What the codes mean for a transaction:
//
//   - 40001: the transaction could not be serialized with concurrent ones
//     (REPEATABLE READ or SERIALIZABLE in PostgreSQL; every retry error of
//     CockroachDB, whose messages contain "restart transaction"; conflicts
//     in YugabyteDB). The transaction has been aborted; run it again.
//   - 40P01: the transaction was the victim of a deadlock and was aborted.
//     The PostgreSQL manual says it may also be advisable to retry it;
//     YugabyteDB documents it as retryable by the client.
//   - 23505, 23P01: a unique or exclusion constraint was violated. The
//     PostgreSQL manual says that in some cases this is in effect a
//     serialization failure (for example, a new key chosen after reading
//     the existing ones, while a concurrent transaction chose the same key),
//     and a retry may succeed; but it may as well be a real duplicate that
//     fails on every attempt, so it is opt-in.
//   - 55P03: a lock could not be taken (SELECT … FOR UPDATE NOWAIT, LOCK …
//     NOWAIT, or lock_timeout expired). With a short lock_timeout it ends
//     deadlocks long before deadlock_timeout (1 s by default) finds them;
//     txretry.WithLockTimeout sets one and retries what it ends, which
//     IsLockTimeout tells from NOWAIT's by the routine that raised it.
//   - CR000: an old CockroachDB extension code for retry errors. Current
//     servers send 40001 instead; CockroachDB's Go client still accepts
//     CR000 for backward compatibility.
//   - 40003: the server does not know whether the statement completed.
//     CockroachDB reports ambiguous commits ("result is ambiguous") with it.
//   - 08007: the connection failed while the transaction was being resolved,
//     so its outcome is unknown.
//
// # By engine
//
// The same codes by engine, with what the transaction engine of
// github.com/txretry/txretry/txretry makes of a COMMIT error that leaves
// the outcome unknown ("uncertain": not retried blindly, verified if a
// verifier is configured):
//
//	Engine             Retried by default  Opt-in              Uncertain at COMMIT
//	PostgreSQL         40001, 40P01        23505, 23P01, 55P03 40003, 08007, class 08, 57P01-57P03, 57014, a lost connection
//	CockroachDB        40001               CR000               40003 (ambiguous result), a lost connection
//	YugabyteDB (YSQL)  40001, 40P01        none                as PostgreSQL
//
// Only PostgreSQL has been run here (the integration tests use a real
// server); the CockroachDB and YugabyteDB codes come from their
// documentation only.
//
// Notes:
//
//   - PostgreSQL raises 40001 at COMMIT too, under SERIALIZABLE; the
//     server has then rolled back, so it is retried like any other 40001.
//   - cockroach-go's crdb retries inside a savepoint; txretry re-runs the
//     whole transaction.
//
// # Sources
//
//   - [PG-A]: PostgreSQL manual, Appendix A "PostgreSQL Error Codes".
//   - [PG-SFH]: PostgreSQL manual, "Serialization Failure Handling".
//   - [CRDB]: CockroachDB docs, "Transaction Retry Error Reference".
//   - [CRDB-AMB]: CockroachDB docs, "Transactions" (ambiguous commits).
//   - [CRDB-GO]: cockroach-go, package crdb (its retry loop accepts CR000).
//   - [YB]: YugabyteDB docs, "Transaction error codes in YSQL".
//
// [PG-A]: https://www.postgresql.org/docs/current/errcodes-appendix.html
// [PG-SFH]: https://www.postgresql.org/docs/current/mvcc-serialization-failure-handling.html
// [CRDB]: https://www.cockroachlabs.com/docs/stable/transaction-retry-error-reference
// [CRDB-AMB]: https://www.cockroachlabs.com/docs/stable/transactions
// [CRDB-GO]: https://github.com/cockroachdb/cockroach-go
// [YB]: https://docs.yugabyte.com/stable/develop/learn/transactions/transactions-errorcodes-ysql/
package pgerr
