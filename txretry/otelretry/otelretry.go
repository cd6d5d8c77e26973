package otelretry

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/txretry/txretry/txretry"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/txretry/txretry/txretry/otelretry"

// Attribute keys. The db.* and error.type keys are those of the
// OpenTelemetry semantic conventions for database clients; the txretry.*
// keys are this package's own.
const (
	DBSystemNameKey         = attribute.Key("db.system.name")
	DBOperationNameKey      = attribute.Key("db.operation.name")
	DBResponseStatusCodeKey = attribute.Key("db.response.status_code")
	ErrorTypeKey            = attribute.Key("error.type")

	OutcomeKey      = attribute.Key("txretry.outcome")
	ClassKey        = attribute.Key("txretry.class")
	VerifierKey     = attribute.Key("txretry.verifier")
	VerificationKey = attribute.Key("txretry.verification")
	AttemptKey      = attribute.Key("txretry.attempt")
	AttemptsKey     = attribute.Key("txretry.attempts")
	DurationKey     = attribute.Key("txretry.duration")
	DelayKey        = attribute.Key("txretry.delay")
	WaitedKey       = attribute.Key("txretry.waited")
	QueuedKey       = attribute.Key("txretry.queued")
)

// Span event names.
const (
	EventAttemptStarted = "txretry.attempt.started"
	EventAttemptFailed  = "txretry.attempt.failed"
	EventRetryScheduled = "txretry.retry.scheduled"
	EventCommitVerified = "txretry.commit.verified"
)

// errorTypeOther is the semantic conventions' error.type for an error of
// unknown type.
const errorTypeOther = "_OTHER"

// An Option configures [NewObserver].
type Option func(*config)

type config struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	dbSystem string
	errs     []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: otelretry: %s", txretry.ErrInvalidOption, fmt.Sprintf(format, args...)))
}

// WithMeterProvider sets the meter provider. Default: the global one
// (otel.GetMeterProvider) at the time NewObserver is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.fail("WithMeterProvider(nil)")
			return
		}
		c.mp = mp
	}
}

// WithTracerProvider sets the tracer provider. Default: the global one
// (otel.GetTracerProvider) at the time NewObserver is called.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp == nil {
			c.fail("WithTracerProvider(nil)")
			return
		}
		c.tp = tp
	}
}

// WithDBSystem sets the db.system.name attribute of every metric and span:
// one of the semantic conventions' values such as "postgresql", "mysql" or
// "mariadb". An empty name is an error. Default: the attribute is omitted.
func WithDBSystem(name string) Option {
	return func(c *config) {
		if name == "" {
			c.fail(`WithDBSystem("")`)
			return
		}
		c.dbSystem = name
	}
}

// Observer records txretry events as OpenTelemetry metrics and spans; see
// the package documentation for what it records. It is safe for concurrent
// use; create one per database (or per process) and share it.
type Observer struct {
	tracer trace.Tracer
	system []attribute.KeyValue // db.system.name, or nothing

	calls         metric.Int64Counter
	attempts      metric.Int64Histogram
	duration      metric.Float64Histogram
	waited        metric.Float64Histogram
	queued        metric.Float64Histogram
	failures      metric.Int64Counter
	retries       metric.Int64Counter
	uncertain     metric.Int64Counter
	verifications metric.Int64Counter
}

var (
	_ txretry.Observer    = (*Observer)(nil)
	_ txretry.CallStarter = (*Observer)(nil)
)

// durationBuckets are the semantic conventions' advice for
// db.client.operation.duration, in seconds.
var durationBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

// NewObserver returns an observer that records metrics with the meter
// provider and spans with the tracer provider. Pass it to each call with
// txretry.WithObserver. The error matches txretry.ErrInvalidOption for a bad
// option, or comes from the meter provider if it cannot create an instrument.
func NewObserver(opts ...Option) (*Observer, error) {
	c := &config{}
	for _, opt := range opts {
		if opt == nil {
			c.fail("nil Option")
			continue
		}
		opt(c)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	o := &Observer{tracer: c.tp.Tracer(ScopeName)}
	if c.dbSystem != "" {
		o.system = []attribute.KeyValue{DBSystemNameKey.String(c.dbSystem)}
	}
	m := c.mp.Meter(ScopeName)
	var errs [9]error
	o.calls, errs[0] = m.Int64Counter("txretry.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Calls of RunInTx, by outcome."))
	o.attempts, errs[1] = m.Int64Histogram("txretry.call.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts made per call, the first one included."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50, 100))
	o.duration, errs[2] = m.Float64Histogram("txretry.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of a call, all attempts and waits included."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	o.waited, errs[3] = m.Float64Histogram("txretry.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a call spent in backoff waits between attempts."),
		metric.WithExplicitBucketBoundaries(append([]float64{0}, durationBuckets...)...))
	o.queued, errs[8] = m.Float64Histogram("txretry.queue.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a call spent waiting for the contention manager's admission."),
		metric.WithExplicitBucketBoundaries(append([]float64{0}, durationBuckets...)...))
	o.failures, errs[4] = m.Int64Counter("txretry.attempt.failures", metric.WithUnit("{failure}"),
		metric.WithDescription("Failed attempts, by class and database error code."))
	o.retries, errs[5] = m.Int64Counter("txretry.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Retries scheduled: an attempt failed and another one will start after a wait."))
	o.uncertain, errs[6] = m.Int64Counter("txretry.commit.uncertain", metric.WithUnit("{commit}"),
		metric.WithDescription("COMMITs whose outcome was unknown."))
	o.verifications, errs[7] = m.Int64Counter("txretry.commit.verifications", metric.WithUnit("{verification}"),
		metric.WithDescription("Verifications of uncertain commits, by verifier and result."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("otelretry: create instruments: %w", err)
	}
	return o, nil
}

// call is the context that StartCall returns: the caller's context with the
// call's span, and what the span's end needs to know. Observe finds it by
// its observer, so that several observers of one call (or another tracing
// observer that starts a span after this one) never mix their spans up.
type call struct {
	context.Context
	o    *Observer
	span trace.Span // safe for concurrent use

	mu sync.Mutex
	// code and errType of the current attempt's failure.
	code, errType string
}

// callKey asks a context for the call of an observer.
type callKey struct{ o *Observer }

// Value returns c for its observer's callKey, else the value of the
// context c wraps.
func (c *call) Value(key any) any {
	if k, ok := key.(callKey); ok && k.o == c.o {
		return c
	}
	return c.Context.Value(key)
}

// StartCall implements txretry.CallStarter: it starts the call's span, a
// child of the span in ctx, and returns a context that carries it, so that
// the spans of the statements fn runs are its children. The span ends when
// the call's CallFinished event is observed.
func (o *Observer) StartCall(ctx context.Context, label string) context.Context {
	if ctx == nil {
		return ctx
	}
	name := "txretry"
	if label != "" {
		name += " " + label
	}
	ctx, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(o.base(label)...))
	return &call{Context: ctx, o: o, span: span}
}

// callOf returns the call that ctx belongs to, or nil for a context that
// StartCall did not return (nor derive from).
func (o *Observer) callOf(ctx context.Context) *call {
	if ctx == nil {
		return nil
	}
	c, _ := ctx.Value(callKey{o}).(*call)
	return c
}

// Observe implements txretry.Observer.
func (o *Observer) Observe(ctx context.Context, e txretry.Event) {
	switch e.Kind {
	case txretry.AttemptStarted:
		c := o.callOf(ctx)
		c.setFailure("", "")
		c.event(EventAttemptStarted, AttemptKey.Int(e.Attempt), QueuedKey.Float64(e.Queued.Seconds()))
	case txretry.AttemptFailed:
		o.attemptFailed(ctx, e)
	case txretry.RetryScheduled:
		o.retries.Add(ctx, 1, metric.WithAttributes(o.base(e.Label)...))
		o.callOf(ctx).event(EventRetryScheduled, AttemptKey.Int(e.Attempt), DelayKey.Float64(e.Delay.Seconds()))
	case txretry.CommitVerified:
		verifier, result := VerifierKey.String(e.Verifier), VerificationKey.String(e.Verification.String())
		o.verifications.Add(ctx, 1, metric.WithAttributes(append(o.base(e.Label), verifier, result)...))
		o.callOf(ctx).event(EventCommitVerified,
			append([]attribute.KeyValue{verifier, result}, codeAttrs(e.Code, e.ErrType)...)...)
	case txretry.CallFinished:
		o.callFinished(ctx, e)
	}
}

// base returns the attributes common to all metrics: db.system.name and
// db.operation.name (the call's label), each if set, in a new slice with
// room for more.
func (o *Observer) base(label string) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, o.system...)
	if label != "" {
		attrs = append(attrs, DBOperationNameKey.String(label))
	}
	return attrs
}

// codeAttrs describes an error by its code and type, never its message.
func codeAttrs(code, errType string) []attribute.KeyValue {
	if code == "" && errType == "" {
		return nil
	}
	if errType == "" {
		errType = errorTypeOther
	}
	if code == "" {
		return []attribute.KeyValue{ErrorTypeKey.String(errType)}
	}
	return []attribute.KeyValue{DBResponseStatusCodeKey.String(code), ErrorTypeKey.String(errType)}
}

func (o *Observer) attemptFailed(ctx context.Context, e txretry.Event) {
	errAttrs := codeAttrs(e.Code, e.ErrType)
	class := ClassKey.String(e.Class.String())
	o.failures.Add(ctx, 1, metric.WithAttributes(append(append(o.base(e.Label), class), errAttrs...)...))
	if e.Class == txretry.Uncertain {
		o.uncertain.Add(ctx, 1, metric.WithAttributes(append(o.base(e.Label), errAttrs...)...))
	}
	c := o.callOf(ctx)
	c.setFailure(e.Code, e.ErrType)
	c.event(EventAttemptFailed, append([]attribute.KeyValue{AttemptKey.Int(e.Attempt), class, DurationKey.Float64(e.Duration.Seconds())}, errAttrs...)...)
}

func (o *Observer) callFinished(ctx context.Context, e txretry.Event) {
	attrs := append(o.base(e.Label), OutcomeKey.String(e.Outcome.String()))
	set := metric.WithAttributeSet(attribute.NewSet(attrs...))
	o.calls.Add(ctx, 1, set)
	o.attempts.Record(ctx, int64(e.Attempts), set)
	o.duration.Record(ctx, e.Duration.Seconds(), set)
	o.waited.Record(ctx, e.Waited.Seconds(), set)
	o.queued.Record(ctx, e.Queued.Seconds(), set)

	c := o.callOf(ctx)
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.span.SetAttributes(OutcomeKey.String(e.Outcome.String()), AttemptsKey.Int(e.Attempts),
		WaitedKey.Float64(e.Waited.Seconds()), QueuedKey.Float64(e.Queued.Seconds()))
	if e.Outcome != txretry.Committed && e.Outcome != txretry.AlreadyCommitted {
		// The last failure explains an exhausted, failed or uncertain call,
		// not a cancelled or panicked one.
		errType := e.Outcome.String()
		switch {
		case e.Outcome == txretry.Cancelled || e.Outcome == txretry.Panicked:
		case c.code != "":
			errType = c.code
			c.span.SetAttributes(DBResponseStatusCodeKey.String(c.code))
		case c.errType != "":
			errType = c.errType
		}
		c.span.SetAttributes(ErrorTypeKey.String(errType))
		c.span.SetStatus(codes.Error, e.Outcome.String())
	}
	c.span.End()
}

// setFailure records the current attempt's failure, if there is a call.
func (c *call) setFailure(code, errType string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.code, c.errType = code, errType
}

// event adds an event to the call's span, if there is a call.
func (c *call) event(name string, attrs ...attribute.KeyValue) {
	if c == nil {
		return
	}
	c.span.AddEvent(name, trace.WithAttributes(attrs...))
}
