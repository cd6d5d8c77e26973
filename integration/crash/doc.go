// Package crash kills processes that make transfers with idempotency keys
// (txretry.WithIdempotencyKey) at random moments, COMMIT in flight
// included, and has new processes re-submit every request whose answer was
// lost, to check that every request is applied exactly once and that every
// re-submission of an applied request is answered ErrAlreadyCommitted.
//
// The test re-executes its own binary as the child (TXRETRY_CRASH_CHILD
// set), which connects through a fault proxy run by the parent; the parent
// stalls a COMMIT's reply at the proxy to kill the child while that COMMIT
// is in flight, and sends the child SIGKILL. Set the number of kills per
// driver path with -crash.kills or TXRETRY_CRASH_KILLS; else it is 10, or
// 30 when TXRETRY_LONG is true (make test-all).
//
// The package holds tests only.
package crash
