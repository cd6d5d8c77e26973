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
//	txretry.attempt.failures      Int64Counter         {failure}       txretry.class, db.response.status_code, error.type
//	txretry.retries               Int64Counter         {retry}         (none)
//	txretry.commit.uncertain      Int64Counter         {commit}        db.response.status_code, error.type
//	txretry.commit.verifications  Int64Counter         {verification}  txretry.verifier, txretry.verification
//
// In detail:
//
//   - txretry.calls counts finished calls; txretry.outcome is "committed",
//     "permanent_error", "exhausted" (retries ran out), "uncertain" (the
//     commit's outcome is unknown), "cancelled" or "panicked".
//   - txretry.call.attempts records the attempts of each call, the first one
//     included (1 for a first-try success).
//   - txretry.call.duration records each call's duration, attempts and
//     waits included; txretry.wait.duration the part of it spent waiting
//     between attempts (0 for a call that did not retry). Its sum is the
//     latency that retries added.
//   - txretry.attempt.failures counts failed attempts; txretry.class is
//     "retryable" (a serialization failure, deadlock or other error the
//     classifier retries), "permanent" or "uncertain". Retryable failures by
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
// Each call that starts an attempt gets one span of kind internal, named
// "txretry" or "txretry <label>", a child of the span in the call's
// context. (The observer cannot change the context handed to fn, so spans
// of the statements fn runs are its siblings, not its children.) Its events are txretry.attempt.started (txretry.attempt),
// txretry.attempt.failed (txretry.attempt, txretry.class, txretry.duration
// in seconds, db.response.status_code, error.type), txretry.retry.scheduled
// (txretry.attempt, txretry.delay in seconds) and txretry.commit.verified
// (txretry.verifier, txretry.verification and the verifier's error code).
// When the call returns, the span gets txretry.outcome, txretry.attempts and
// txretry.waited (seconds); a call that did not commit also gets status
// Error (described by its outcome), error.type (the last failure's code,
// else its Go type, else the outcome) and db.response.status_code if known.
//
// The observer learns of a call only through its events, which carry the
// caller's context: it keeps the span of a call in flight keyed by that
// context. Concurrent calls must therefore each have their own context (a
// context derived per call, such as a request's context or one returned by
// tracer.Start, is enough); if two calls are in flight on the same context
// at once, their events cannot be told apart and their spans end early with
// txretry.shared_context=true. Metrics are exact in every case.
package otelretry
