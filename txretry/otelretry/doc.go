// Package otelretry records txretry's retries as OpenTelemetry metrics and
// spans.
//
// It is a module of its own, so that the txretry module keeps no
// OpenTelemetry dependency:
//
//	obs, err := otelretry.NewObserver(otelretry.WithDBSystem("postgresql"))
//	if err != nil {
//		return err
//	}
//	err = txretry.RunInTx(ctx, db, fn, txretry.WithLabel("transfer"), txretry.WithObserver(obs))
//
// [Observer] implements [txretry.CallStarter]: each call gets a span, and
// the context fn receives carries it. It can be combined with other
// observers (such as slogretry's) by passing several txretry.WithObserver
// options.
//
// Events carry codes and Go types, never error messages, SQL text or
// arguments, so nothing a row contains reaches a metric or a span through
// this package.
//
// # Attributes
//
// Every metric and span carries db.system.name (from [WithDBSystem], if
// set) and db.operation.name (the call's [txretry.WithLabel], if set), the
// attributes of the OpenTelemetry semantic conventions for database clients.
// Keep labels few and fixed: they become metric attributes.
// An error is described by db.response.status_code (the SQLSTATE such as
// "40001", or the MySQL error number such as "1213", when it has one) and
// error.type (its Go type, such as "pgconn.PgError", or "_OTHER").
//
// # Metrics
//
// The meter's instrumentation scope is [ScopeName].
//
//	name                          instrument           unit            attributes (besides db.*)
//	txretry.calls                 Int64Counter         {call}          txretry.outcome
//	txretry.call.attempts         Int64Histogram       {attempt}       txretry.outcome
//	txretry.call.duration         Float64Histogram     s               txretry.outcome
//	txretry.wait.duration         Float64Histogram     s               txretry.outcome
//	txretry.queue.duration        Float64Histogram     s               txretry.outcome
//	txretry.attempt.failures      Int64Counter         {failure}       txretry.class, db.response.status_code, error.type
//	txretry.retries               Int64Counter         {retry}         (none)
//	txretry.commit.uncertain      Int64Counter         {commit}        db.response.status_code, error.type
//	txretry.commit.verifications  Int64Counter         {verification}  txretry.verifier, txretry.verification
//
// In detail:
//
//   - txretry.calls counts finished calls; txretry.outcome is "committed",
//     "permanent_error", "exhausted" (retries ran out), "uncertain" (the
//     commit's outcome is unknown), "cancelled", "panicked" or
//     "already_committed" (the idempotency key was committed before; not
//     an error on the span).
//   - txretry.call.attempts records the attempts of each call, the first one
//     included (1 for a first-try success).
//   - txretry.call.duration records each call's duration, attempts and
//     waits included; txretry.wait.duration the part of it spent in backoff
//     waits between attempts (0 for a call that did not retry), and
//     txretry.queue.duration the part spent waiting for the contention
//     manager's admission before its attempts. The contention manager is on
//     by default for each database handle, and its queue then spaces retries
//     instead of the default backoff: the wait is often 0 and the queue time
//     is where contention shows. Their sums are the latency that contention
//     added.
//   - txretry.attempt.failures counts failed attempts; txretry.class is
//     "retryable" (a serialization failure, deadlock or other error the
//     classifier retries), "connection_lost" (retried by
//     txretry.WithRetryOnConnectionLoss), "permanent" or "uncertain".
//     Retryable failures by
//     db.response.status_code are the conflict rate.
//   - txretry.retries counts retries actually scheduled: a retryable failure
//     on the last allowed attempt is counted in txretry.attempt.failures but
//     not here.
//   - txretry.commit.uncertain counts COMMITs whose outcome was unknown, and
//     txretry.commit.verifications the verifications that followed, with
//     txretry.verifier ("callback", "xact-status", "commit-marker") and
//     txretry.verification ("committed", "not_committed", "unresolved").
//
// # Spans
//
// Each call gets one span of kind internal, named "txretry" or
// "txretry <label>", started before the first attempt as a child of the
// span in the caller's context. The context fn receives carries it, so the
// spans of the statements fn runs (with an instrumented driver, or spans of
// its own) are its children, attempt after attempt. Concurrent calls may
// share a context: each call's span is its own.
//
// The span's events are txretry.attempt.started (txretry.attempt,
// txretry.queued: seconds waited for admission before the attempt),
// txretry.attempt.failed (txretry.attempt, txretry.class, txretry.duration
// in seconds, db.response.status_code, error.type),
// txretry.retry.scheduled (txretry.attempt, txretry.delay in seconds) and
// txretry.commit.verified (txretry.verifier, txretry.verification and the
// verifier's error code). When the call returns, the span gets
// txretry.outcome, txretry.attempts, txretry.waited and txretry.queued (in
// seconds, for the whole call), and ends; a call that did not commit also
// gets status Error (described by its outcome), error.type (the last
// failure's code, else its Go type, else the outcome) and
// db.response.status_code if known. A call whose context ended, or whose
// time ran out, while it waited for its first admission has a span with
// txretry.attempts=0.
//
// Several tracing observers may observe one call: each finds its own span,
// and the spans nest in the order the observers were added.
package otelretry
