// Package breaker is a circuit breaker around txretry.RunInTx, as an
// example to copy: txretry retries a transaction that conflicted; it does
// not protect a database that is down or drowning. A breaker around RunInTx
// (never inside fn, and never a retry loop around RunInTx) sees each call
// once, after txretry's retries, and opens when calls keep failing in a way
// that blames the database: connection errors, exhausted retries, uncertain
// commits. Business errors, constraint violations and the caller's own
// cancellation or deadline say nothing about the database's health and do
// not count.
//
// Whether exhausted retries should count is a judgment call: on a hot row
// they mean contention, not an outage; drop that case if your workload has
// hot rows by design. On MySQL, add go-sql-driver's mysql.ErrInvalidConn to
// the connection errors.
package breaker
