// Package slogretry logs txretry's retries with log/slog.
//
// [New] returns a [txretry.Observer] that writes one structured line per
// event worth a human's attention and nothing for a call that committed on
// its first attempt:
//
//	obs := slogretry.New(slog.Default())
//	err := txretry.RunInTx(ctx, db, fn, txretry.WithLabel("transfer"), txretry.WithObserver(obs))
//
// # Lines and levels
//
// The observer keeps no state between events, so it may be shared by any
// number of concurrent calls. Every line carries the attribute "label" (the
// call's [txretry.WithLabel], possibly empty) and the attributes listed
// below; durations are [slog.Duration] values.
//
//   - "txretry: retryable failure" (Info; [WithRetryLevel]): an attempt
//     failed with a serialization failure, a deadlock or another error the
//     call's classifier retries. Attributes: attempt, code (SQLSTATE or
//     MySQL error number, empty when the error has none), err_type (the Go
//     type of the error), duration (of the attempt). The call retries unless
//     this was its last attempt, in which case an "exhausted" line follows.
//   - "txretry: commit outcome unknown" (Warn; [WithProblemLevel]): COMMIT
//     failed in a way that leaves its outcome unknown. Attributes: attempt,
//     code, err_type, duration.
//   - "txretry: commit verified" (Info; [WithRetryLevel]) or "txretry: commit
//     unresolved" (Warn; [WithProblemLevel]): a verifier ran after an
//     uncertain commit. Attributes: verifier, verification ("committed",
//     "not_committed" or "unresolved"), code, err_type (of the verifier's
//     error, if any).
//   - "txretry: call finished": a call that made more than one attempt, ran
//     out of retries, ended with an uncertain commit or was cancelled between
//     attempts. Attributes: outcome ("committed", "permanent_error",
//     "exhausted", "uncertain", "cancelled", "panicked",
//     "already_committed"), attempts, duration
//     (of the whole call), waited (time spent in backoff waits between
//     attempts), queued (time spent waiting for the contention manager's
//     admission; with the contention manager on, the default, its queue
//     spaces retries instead of backoff, so waited is often 0 and the
//     waiting shows here). The level is
//     Warn ([WithProblemLevel]) for "exhausted", "uncertain" and "panicked",
//     Info ([WithRetryLevel]) otherwise.
//   - "txretry: permanent failure" and "txretry: retry scheduled" (Debug;
//     [WithDebugLevel]): an attempt failed with an error that is returned to
//     the caller as it is (attempt, code, err_type, duration), and the wait
//     chosen before the next attempt (attempt, delay). They complete the
//     picture when debugging and are dropped by a handler at Info.
//
// A call that commits on its first attempt, or that fails on its first
// attempt with an error the caller receives, produces no line at Info: the
// caller sees its own error and a healthy workload stays quiet.
//
// # What is never logged
//
// Events carry codes and Go types, never error messages, SQL text or
// arguments, so nothing a row contains can reach the log through this
// package.
package slogretry
