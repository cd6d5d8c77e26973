package slogretry

import (
	"context"
	"log/slog"

	"github.com/txretry/txretry/txretry"
)

// An Option configures [New].
type Option func(*observer)

// WithRetryLevel sets the level of retryable failures, resolved
// verifications and finished calls that were retried. Default: slog.LevelInfo.
func WithRetryLevel(l slog.Level) Option {
	return func(o *observer) { o.retry = l }
}

// WithProblemLevel sets the level of commits with an unknown outcome,
// connections lost before COMMIT (txretry.WithRetryOnConnectionLoss),
// unresolved verifications and calls that ran out of retries, ended with an
// uncertain commit or panicked. Default: slog.LevelWarn.
func WithProblemLevel(l slog.Level) Option {
	return func(o *observer) { o.problem = l }
}

// WithDebugLevel sets the level of permanent failures and scheduled retries.
// Default: slog.LevelDebug.
func WithDebugLevel(l slog.Level) Option {
	return func(o *observer) { o.debug = l }
}

type observer struct {
	l                     *slog.Logger
	retry, problem, debug slog.Level
}

// New returns an observer that logs a call's retries to l, as described in
// the package documentation. A nil l means slog.Default() at the time of
// each event. The observer is safe for concurrent use and keeps no state
// between events.
func New(l *slog.Logger, opts ...Option) txretry.Observer {
	o := &observer{l: l, retry: slog.LevelInfo, problem: slog.LevelWarn, debug: slog.LevelDebug}
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	return o
}

// Observe implements txretry.Observer.
func (o *observer) Observe(ctx context.Context, e txretry.Event) {
	var (
		level slog.Level
		msg   string
	)
	switch e.Kind {
	case txretry.AttemptFailed:
		switch e.Class {
		case txretry.Retryable:
			level, msg = o.retry, "txretry: retryable failure"
		case txretry.ConnectionLost:
			level, msg = o.problem, "txretry: connection lost before commit"
		case txretry.Uncertain:
			level, msg = o.problem, "txretry: commit outcome unknown"
		default:
			level, msg = o.debug, "txretry: permanent failure"
		}
	case txretry.RetryScheduled:
		level, msg = o.debug, "txretry: retry scheduled"
	case txretry.CommitVerified:
		level, msg = o.retry, "txretry: commit verified"
		if e.Verification != txretry.VerifiedCommitted && e.Verification != txretry.VerifiedNotCommitted {
			level, msg = o.problem, "txretry: commit unresolved"
		}
	case txretry.CallFinished:
		var ok bool
		if level, ok = o.finishedLevel(e); !ok {
			return
		}
		msg = "txretry: call finished"
	default:
		return
	}
	l := o.l
	if l == nil {
		l = slog.Default()
	}
	if !l.Enabled(ctx, level) {
		return
	}
	label := slog.String("label", e.Label)
	switch e.Kind {
	case txretry.AttemptFailed:
		l.LogAttrs(ctx, level, msg, label, slog.Int("attempt", e.Attempt), slog.String("code", e.Code),
			slog.String("err_type", e.ErrType), slog.Duration("duration", e.Duration))
	case txretry.RetryScheduled:
		l.LogAttrs(ctx, level, msg, label, slog.Int("attempt", e.Attempt), slog.Duration("delay", e.Delay))
	case txretry.CommitVerified:
		l.LogAttrs(ctx, level, msg, label, slog.String("verifier", e.Verifier),
			slog.String("verification", e.Verification.String()), slog.String("code", e.Code),
			slog.String("err_type", e.ErrType))
	case txretry.CallFinished:
		l.LogAttrs(ctx, level, msg, label, slog.String("outcome", e.Outcome.String()),
			slog.Int("attempts", e.Attempts), slog.Duration("duration", e.Duration),
			slog.Duration("waited", e.Waited), slog.Duration("queued", e.Queued))
	}
}

// finishedLevel says whether a CallFinished event is logged, and at which
// level: calls that retried, ran out of retries, ended uncertain or were
// cancelled between attempts.
func (o *observer) finishedLevel(e txretry.Event) (slog.Level, bool) {
	switch e.Outcome {
	case txretry.Exhausted, txretry.CommitUncertain:
		return o.problem, true
	case txretry.Panicked:
		return o.problem, e.Attempts > 1
	case txretry.Cancelled:
		// Cancelled after at least one attempt means a retry was pending.
		return o.retry, e.Attempts >= 1
	default:
		return o.retry, e.Attempts > 1
	}
}
