package otelretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakeclock"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/otelretry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	serialization = &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
	uniqueMarker  = &fakedb.SQLStateError{Code: "23505", Message: "duplicate key value (k)=(MARKER-7d1f)"}
	connLost      = &fakedb.SQLStateError{Code: "08006", Message: "connection lost MARKER-7d1f"}
)

// failExecs returns an OnExec hook that fails the n-th exec with errs[n-1]
// and lets the later ones succeed.
func failExecs(errs ...error) func(context.Context, int, string, []driver.NamedValue) error {
	return func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
		if n <= len(errs) {
			return errs[n-1]
		}
		return nil
	}
}

func debit(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, "UPDATE account SET balance = balance - $1 WHERE id = $2", "MARKER-7d1f", 1)
	return err
}

func TestObserverRecords(t *testing.T) {
	tests := []struct {
		name        string
		setup       func(cancel context.CancelFunc) *fakedb.Driver
		opts        []txretry.Option
		wantMetrics []string
		wantSpans   []string
	}{
		{
			name:  "first-try success",
			setup: func(context.CancelFunc) *fakedb.Driver { return &fakedb.Driver{} },
			wantMetrics: []string{
				`txretry.call.attempts{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=1`,
				`txretry.call.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0`,
				`txretry.calls{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} 1`,
				`txretry.queue.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0`,
			},
			wantSpans: []string{
				`txretry transfer Unset "" {db.operation.name=transfer,db.system.name=postgresql,txretry.attempts=1,txretry.outcome=committed,txretry.queued=0,txretry.waited=0}`,
				`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
			},
		},
		{
			name: "retry then success",
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnExec: failExecs(serialization, serialization)}
			},
			wantMetrics: []string{
				`txretry.attempt.failures{db.operation.name=transfer,db.response.status_code=40001,db.system.name=postgresql,error.type=fakedb.SQLStateError,txretry.class=retryable} 2`,
				`txretry.call.attempts{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=3`,
				`txretry.call.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0.01`,
				`txretry.calls{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} 1`,
				`txretry.queue.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0`,
				`txretry.retries{db.operation.name=transfer,db.system.name=postgresql} 2`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0.01`,
			},
			wantSpans: []string{
				`txretry transfer Unset "" {db.operation.name=transfer,db.system.name=postgresql,txretry.attempts=3,txretry.outcome=committed,txretry.queued=0,txretry.waited=0.01}`,
				`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
				`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=retryable,txretry.duration=0}`,
				`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0.005}`,
				`  txretry.attempt.started {txretry.attempt=2,txretry.queued=0}`,
				`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=2,txretry.class=retryable,txretry.duration=0}`,
				`  txretry.retry.scheduled {txretry.attempt=2,txretry.delay=0.005}`,
				`  txretry.attempt.started {txretry.attempt=3,txretry.queued=0}`,
			},
		},
		{
			name: "exhaustion",
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnExec: failExecs(serialization, serialization, serialization)}
			},
			opts: []txretry.Option{txretry.WithMaxAttempts(2)},
			wantMetrics: []string{
				`txretry.attempt.failures{db.operation.name=transfer,db.response.status_code=40001,db.system.name=postgresql,error.type=fakedb.SQLStateError,txretry.class=retryable} 2`,
				`txretry.call.attempts{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=exhausted} count=1 sum=2`,
				`txretry.call.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=exhausted} count=1 sum=0.005`,
				`txretry.calls{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=exhausted} 1`,
				`txretry.queue.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=exhausted} count=1 sum=0`,
				`txretry.retries{db.operation.name=transfer,db.system.name=postgresql} 1`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=exhausted} count=1 sum=0.005`,
			},
			wantSpans: []string{
				`txretry transfer Error "exhausted" {db.operation.name=transfer,db.response.status_code=40001,db.system.name=postgresql,error.type=40001,txretry.attempts=2,txretry.outcome=exhausted,txretry.queued=0,txretry.waited=0.005}`,
				`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
				`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=retryable,txretry.duration=0}`,
				`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0.005}`,
				`  txretry.attempt.started {txretry.attempt=2,txretry.queued=0}`,
				`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=2,txretry.class=retryable,txretry.duration=0}`,
			},
		},
		{
			name: "permanent error after a retry",
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnExec: failExecs(serialization, uniqueMarker)}
			},
			wantMetrics: []string{
				`txretry.attempt.failures{db.operation.name=transfer,db.response.status_code=23505,db.system.name=postgresql,error.type=fakedb.SQLStateError,txretry.class=permanent} 1`,
				`txretry.attempt.failures{db.operation.name=transfer,db.response.status_code=40001,db.system.name=postgresql,error.type=fakedb.SQLStateError,txretry.class=retryable} 1`,
				`txretry.call.attempts{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=permanent_error} count=1 sum=2`,
				`txretry.call.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=permanent_error} count=1 sum=0.005`,
				`txretry.calls{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=permanent_error} 1`,
				`txretry.queue.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=permanent_error} count=1 sum=0`,
				`txretry.retries{db.operation.name=transfer,db.system.name=postgresql} 1`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=permanent_error} count=1 sum=0.005`,
			},
			wantSpans: []string{
				`txretry transfer Error "permanent_error" {db.operation.name=transfer,db.response.status_code=23505,db.system.name=postgresql,error.type=23505,txretry.attempts=2,txretry.outcome=permanent_error,txretry.queued=0,txretry.waited=0.005}`,
				`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
				`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=retryable,txretry.duration=0}`,
				`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0.005}`,
				`  txretry.attempt.started {txretry.attempt=2,txretry.queued=0}`,
				`  txretry.attempt.failed {db.response.status_code=23505,error.type=fakedb.SQLStateError,txretry.attempt=2,txretry.class=permanent,txretry.duration=0}`,
			},
		},
		{
			name: "uncertain commit",
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnCommit: func(int) error { return connLost }}
			},
			wantMetrics: []string{
				`txretry.attempt.failures{db.operation.name=transfer,db.response.status_code=08006,db.system.name=postgresql,error.type=fakedb.SQLStateError,txretry.class=uncertain} 1`,
				`txretry.call.attempts{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=uncertain} count=1 sum=1`,
				`txretry.call.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=uncertain} count=1 sum=0`,
				`txretry.calls{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=uncertain} 1`,
				`txretry.commit.uncertain{db.operation.name=transfer,db.response.status_code=08006,db.system.name=postgresql,error.type=fakedb.SQLStateError} 1`,
				`txretry.queue.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=uncertain} count=1 sum=0`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=uncertain} count=1 sum=0`,
			},
			wantSpans: []string{
				`txretry transfer Error "uncertain" {db.operation.name=transfer,db.response.status_code=08006,db.system.name=postgresql,error.type=08006,txretry.attempts=1,txretry.outcome=uncertain,txretry.queued=0,txretry.waited=0}`,
				`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
				`  txretry.attempt.failed {db.response.status_code=08006,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=uncertain,txretry.duration=0}`,
			},
		},
		{
			name: "uncertain commit verified not committed, then committed",
			setup: func(context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnCommit: func(n int) error {
					if n == 1 {
						return connLost
					}
					return nil
				}}
			},
			opts: []txretry.Option{txretry.WithVerify(func(context.Context) (bool, error) { return false, nil })},
			wantMetrics: []string{
				`txretry.attempt.failures{db.operation.name=transfer,db.response.status_code=08006,db.system.name=postgresql,error.type=fakedb.SQLStateError,txretry.class=uncertain} 1`,
				`txretry.call.attempts{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=2`,
				`txretry.call.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0.005`,
				`txretry.calls{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} 1`,
				`txretry.commit.uncertain{db.operation.name=transfer,db.response.status_code=08006,db.system.name=postgresql,error.type=fakedb.SQLStateError} 1`,
				`txretry.commit.verifications{db.operation.name=transfer,db.system.name=postgresql,txretry.verification=not_committed,txretry.verifier=callback} 1`,
				`txretry.queue.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0`,
				`txretry.retries{db.operation.name=transfer,db.system.name=postgresql} 1`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0.005`,
			},
			wantSpans: []string{
				`txretry transfer Unset "" {db.operation.name=transfer,db.system.name=postgresql,txretry.attempts=2,txretry.outcome=committed,txretry.queued=0,txretry.waited=0.005}`,
				`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
				`  txretry.attempt.failed {db.response.status_code=08006,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=uncertain,txretry.duration=0}`,
				`  txretry.commit.verified {txretry.verification=not_committed,txretry.verifier=callback}`,
				`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0.005}`,
				`  txretry.attempt.started {txretry.attempt=2,txretry.queued=0}`,
			},
		},
		{
			name: "cancellation between attempts",
			setup: func(cancel context.CancelFunc) *fakedb.Driver {
				return &fakedb.Driver{OnExec: func(context.Context, int, string, []driver.NamedValue) error {
					cancel()
					return serialization
				}}
			},
			opts: []txretry.Option{txretry.WithBackoff(txretry.Constant(0))},
			wantMetrics: []string{
				`txretry.attempt.failures{db.operation.name=transfer,db.response.status_code=40001,db.system.name=postgresql,error.type=fakedb.SQLStateError,txretry.class=retryable} 1`,
				`txretry.call.attempts{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=cancelled} count=1 sum=1`,
				`txretry.call.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=cancelled} count=1 sum=0`,
				`txretry.calls{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=cancelled} 1`,
				`txretry.queue.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=cancelled} count=1 sum=0`,
				`txretry.retries{db.operation.name=transfer,db.system.name=postgresql} 1`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=cancelled} count=1 sum=0`,
			},
			wantSpans: []string{
				`txretry transfer Error "cancelled" {db.operation.name=transfer,db.system.name=postgresql,error.type=cancelled,txretry.attempts=1,txretry.outcome=cancelled,txretry.queued=0,txretry.waited=0}`,
				`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
				`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=retryable,txretry.duration=0}`,
				`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0}`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, otelretry.WithDBSystem("postgresql"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			db := tt.setup(cancel).DB()
			defer db.Close()
			opts := append([]txretry.Option{
				txretry.WithLabel("transfer"),
				txretry.WithClock(&fakeclock.Clock{}),
				txretry.WithBackoff(txretry.Constant(5 * time.Millisecond)), txretry.WithoutContentionManager(), // the backoff alone spaces the retries
				txretry.WithObserver(h.obs),
			}, tt.opts...)
			_ = txretry.RunInTx(ctx, db, debit, opts...)

			diff(t, "metrics", h.metrics(t), tt.wantMetrics)
			diff(t, "spans", h.spanLines(), tt.wantSpans)
		})
	}
}

func TestConcurrentCallsSharingAContext(t *testing.T) {
	// Each call gets its own context from StartCall, so concurrent calls on
	// one context get whole spans of their own.
	h := newHarness(t)
	d := &fakedb.Driver{OnExec: func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
		if n%2 == 1 {
			return serialization
		}
		return nil
	}}
	db := d.DB()
	defer db.Close()
	ctx := context.Background()
	const calls = 16
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			if err := txretry.RunInTx(ctx, db, debit, txretry.WithObserver(h.obs),
				txretry.WithBackoff(txretry.Constant(0)), txretry.WithMaxAttempts(100)); err != nil {
				t.Errorf("RunInTx: %v", err)
			}
		})
	}
	wg.Wait()

	if got := h.counter(t, "txretry.calls", otelretry.OutcomeKey.String("committed")); got != calls {
		t.Errorf("txretry.calls{committed} = %d, want %d", got, calls)
	}
	spans := h.spans.GetSpans()
	if len(spans) != calls {
		t.Fatalf("%d spans, want %d", len(spans), calls)
	}
	var failed, started int
	for _, s := range spans {
		var attempts int64
		for _, a := range s.Attributes {
			if a.Key == otelretry.AttemptsKey {
				attempts = a.Value.AsInt64()
			}
		}
		var spanStarted int64
		for _, e := range s.Events {
			switch e.Name {
			case otelretry.EventAttemptFailed:
				failed++
			case otelretry.EventAttemptStarted:
				started++
				spanStarted++
			}
		}
		if s.Name != "txretry" || attempts < 1 || spanStarted != attempts {
			t.Errorf("span %q with txretry.attempts=%d and %d attempt.started events", s.Name, attempts, spanStarted)
		}
	}
	// Each exec either fails (odd) or succeeds (even): every failure
	// is followed by a retry.
	if st := d.Stats(); failed != st.Execs-calls || started != st.Execs {
		t.Errorf("span events: %d failed, %d started; want %d and %d", failed, started, st.Execs-calls, st.Execs)
	}
	if got := h.counter(t, "txretry.attempt.failures"); got != int64(failed) {
		t.Errorf("txretry.attempt.failures = %d, want %d", got, failed)
	}
}

func TestOverlappingCallsOnOneContext(t *testing.T) {
	h := newHarness(t)
	inA, release := make(chan struct{}), make(chan struct{})
	d := &fakedb.Driver{OnExec: func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
		if n == 1 { // call A: wait while call B starts on the same context
			close(inA)
			<-release
		}
		return nil
	}}
	db := d.DB()
	defer db.Close()
	ctx := context.Background()
	opts := []txretry.Option{txretry.WithObserver(h.obs), txretry.WithLabel("shared"),
		txretry.WithClock(&fakeclock.Clock{}), txretry.WithoutContentionManager()}

	errA := make(chan error, 1)
	go func() { errA <- txretry.RunInTx(ctx, db, debit, opts...) }()
	<-inA
	// Call B starts while A is in flight, and both finish while the other
	// is in flight.
	inB := make(chan struct{})
	errB := make(chan error, 1)
	go func() {
		errB <- txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			close(inB)
			<-release
			return debit(ctx, tx)
		}, opts...)
	}()
	<-inB
	close(release)
	if err := errors.Join(<-errA, <-errB); err != nil {
		t.Fatalf("RunInTx: %v", err)
	}

	spans := h.spans.GetSpans()
	if len(spans) != 2 || spans[0].SpanContext.SpanID() == spans[1].SpanContext.SpanID() {
		t.Fatalf("%d spans, want 2 distinct ones", len(spans))
	}
	diff(t, "spans", h.spanLines(), []string{
		`txretry shared Unset "" {db.operation.name=shared,txretry.attempts=1,txretry.outcome=committed,txretry.queued=0,txretry.waited=0}`,
		`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
		`txretry shared Unset "" {db.operation.name=shared,txretry.attempts=1,txretry.outcome=committed,txretry.queued=0,txretry.waited=0}`,
		`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
	})
}

// TestStatementSpansAreChildren checks the chain a trace shows: the
// caller's span, the call's span, and the spans of the statements fn runs
// with the context it receives, on every attempt.
func TestStatementSpansAreChildren(t *testing.T) {
	h := newHarness(t, otelretry.WithDBSystem("postgresql"))
	db := (&fakedb.Driver{OnExec: failExecs(serialization)}).DB()
	defer db.Close()
	app := h.tp.Tracer("app")
	ctx, request := app.Start(context.Background(), "request")
	err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		ctx, stmt := app.Start(ctx, "UPDATE account")
		defer stmt.End()
		return debit(ctx, tx)
	}, txretry.WithObserver(h.obs), txretry.WithLabel("transfer"), txretry.WithBackoff(txretry.Constant(0)))
	request.End()
	if err != nil {
		t.Fatalf("RunInTx: %v", err)
	}

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range h.spans.GetSpans() {
		byName[s.Name] = append(byName[s.Name], s.Snapshot())
	}
	calls, stmts, reqs := byName["txretry transfer"], byName["UPDATE account"], byName["request"]
	if len(calls) != 1 || len(stmts) != 2 || len(reqs) != 1 {
		t.Fatalf("%d call spans, %d statement spans, %d request spans; want 1, 2 (one per attempt), 1",
			len(calls), len(stmts), len(reqs))
	}
	call, req := calls[0].SpanContext(), reqs[0].SpanContext()
	if got := calls[0].Parent(); !got.Equal(req) {
		t.Errorf("call span's parent %v, want the request span %v", got.SpanID(), req.SpanID())
	}
	for _, s := range stmts {
		if got := s.Parent(); !got.Equal(call) {
			t.Errorf("statement span's parent %v, want the call span %v", got.SpanID(), call.SpanID())
		}
		if s.SpanContext().TraceID() != req.TraceID() {
			t.Errorf("statement span in trace %v, want %v", s.SpanContext().TraceID(), req.TraceID())
		}
	}
}

// startCaller is another tracing observer: it starts a span of its own in
// StartCall and ends it when the call finishes. Like otelretry's, it finds
// its span by a key of its own: trace.SpanFromContext would return the span
// of the last observer that started one.
type startCaller struct{ tracer trace.Tracer }

type startCallerKey struct{}

func (s startCaller) StartCall(ctx context.Context, label string) context.Context {
	ctx, span := s.tracer.Start(ctx, "other "+label)
	return context.WithValue(ctx, startCallerKey{}, span)
}

func (s startCaller) Observe(ctx context.Context, e txretry.Event) {
	if span, ok := ctx.Value(startCallerKey{}).(trace.Span); ok && e.Kind == txretry.CallFinished {
		span.End()
	}
}

// TestSeveralTracingObservers checks that each observer of a call finds its
// own span, whatever span the context handed to Observe carries last.
func TestSeveralTracingObservers(t *testing.T) {
	first, second := newHarness(t), newHarness(t)
	db := (&fakedb.Driver{OnExec: failExecs(serialization)}).DB()
	defer db.Close()
	err := txretry.RunInTx(context.Background(), db, debit, txretry.WithLabel("x"),
		txretry.WithObserver(first.obs), txretry.WithObserver(startCaller{first.tp.Tracer("other")}),
		txretry.WithObserver(second.obs),
		txretry.WithBackoff(txretry.Constant(0)), txretry.WithoutContentionManager(), txretry.WithClock(&fakeclock.Clock{}))
	if err != nil {
		t.Fatalf("RunInTx: %v", err)
	}
	span := []string{
		`txretry x Unset "" {db.operation.name=x,txretry.attempts=2,txretry.outcome=committed,txretry.queued=0,txretry.waited=0}`,
		`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
		`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=retryable,txretry.duration=0}`,
		`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0}`,
		`  txretry.attempt.started {txretry.attempt=2,txretry.queued=0}`,
	}
	diff(t, "second observer's spans", second.spanLines(), span)
	// Spans end in the order the observers were added.
	diff(t, "first observer's spans", first.spanLines(), append(span, `other x Unset "" {}`))

	// The spans nest in the order the observers were added.
	firstSpans, secondSpans := first.spans.GetSpans(), second.spans.GetSpans()
	if len(firstSpans) != 2 || len(secondSpans) != 1 {
		t.Fatalf("%d and %d spans, want 2 and 1", len(firstSpans), len(secondSpans))
	}
	call, other := firstSpans[0], firstSpans[1]
	if !other.Parent.Equal(call.SpanContext) || !secondSpans[0].Parent.Equal(other.SpanContext) {
		t.Errorf("spans do not nest as first's call span > other > second's call span")
	}
}

func TestQueuedTime(t *testing.T) {
	// The contention manager's admission time, as events report it.
	h := newHarness(t)
	ctx := h.obs.StartCall(context.Background(), "transfer")
	for _, e := range []txretry.Event{
		{Kind: txretry.AttemptStarted, Label: "transfer", Attempt: 1, Queued: 2 * time.Millisecond},
		{Kind: txretry.AttemptFailed, Label: "transfer", Attempt: 1, Class: txretry.Retryable, Code: "40P01", ErrType: "pgconn.PgError"},
		{Kind: txretry.RetryScheduled, Label: "transfer", Attempt: 1},
		{Kind: txretry.AttemptStarted, Label: "transfer", Attempt: 2, Queued: 8 * time.Millisecond},
		{Kind: txretry.CallFinished, Label: "transfer", Outcome: txretry.Committed, Attempts: 2,
			Duration: 20 * time.Millisecond, Queued: 10 * time.Millisecond},
	} {
		h.obs.Observe(ctx, e)
	}
	diff(t, "spans", h.spanLines(), []string{
		`txretry transfer Unset "" {db.operation.name=transfer,txretry.attempts=2,txretry.outcome=committed,txretry.queued=0.01,txretry.waited=0}`,
		`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0.002}`,
		`  txretry.attempt.failed {db.response.status_code=40P01,error.type=pgconn.PgError,txretry.attempt=1,txretry.class=retryable,txretry.duration=0}`,
		`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0}`,
		`  txretry.attempt.started {txretry.attempt=2,txretry.queued=0.008}`,
	})
	diff(t, "metrics", h.metrics(t), []string{
		`txretry.attempt.failures{db.operation.name=transfer,db.response.status_code=40P01,error.type=pgconn.PgError,txretry.class=retryable} 1`,
		`txretry.call.attempts{db.operation.name=transfer,txretry.outcome=committed} count=1 sum=2`,
		`txretry.call.duration{db.operation.name=transfer,txretry.outcome=committed} count=1 sum=0.02`,
		`txretry.calls{db.operation.name=transfer,txretry.outcome=committed} 1`,
		`txretry.queue.duration{db.operation.name=transfer,txretry.outcome=committed} count=1 sum=0.01`,
		`txretry.retries{db.operation.name=transfer} 1`,
		`txretry.wait.duration{db.operation.name=transfer,txretry.outcome=committed} count=1 sum=0`,
	})
}

func TestCallEndedInTheQueue(t *testing.T) {
	// A call whose context ends before its first attempt still ends its span.
	h := newHarness(t)
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := txretry.RunInTx(ctx, db, debit, txretry.WithObserver(h.obs), txretry.WithClock(&fakeclock.Clock{}))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunInTx: %v, want context.Canceled", err)
	}
	diff(t, "spans", h.spanLines(), []string{
		`txretry Error "cancelled" {error.type=cancelled,txretry.attempts=0,txretry.outcome=cancelled,txretry.queued=0,txretry.waited=0}`,
	})
}

// listCtx is a context whose dynamic type cannot key a map.
type listCtx struct {
	context.Context
	_ []int
}

func TestAnyContext(t *testing.T) {
	h := newHarness(t)
	db := (&fakedb.Driver{OnExec: failExecs(serialization)}).DB()
	defer db.Close()
	err := txretry.RunInTx(listCtx{Context: context.Background()}, db, debit,
		txretry.WithObserver(h.obs), txretry.WithBackoff(txretry.Constant(0)), txretry.WithoutContentionManager(), txretry.WithClock(&fakeclock.Clock{}))
	if err != nil {
		t.Fatalf("RunInTx: %v", err)
	}
	diff(t, "spans", h.spanLines(), []string{
		`txretry Unset "" {txretry.attempts=2,txretry.outcome=committed,txretry.queued=0,txretry.waited=0}`,
		`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
		`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=retryable,txretry.duration=0}`,
		`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0}`,
		`  txretry.attempt.started {txretry.attempt=2,txretry.queued=0}`,
	})
}

func TestEventsWithoutACall(t *testing.T) {
	// Events of a call the observer never saw start (or of no call at all)
	// record metrics and touch no span.
	h := newHarness(t)
	ctx := context.Background()
	for _, e := range []txretry.Event{
		{Kind: txretry.AttemptStarted, Attempt: 2},
		{Kind: txretry.AttemptFailed, Attempt: 2, Class: txretry.Permanent, ErrType: "net.OpError"},
		{Kind: txretry.RetryScheduled, Attempt: 2},
		{Kind: txretry.CommitVerified, Verifier: "xact-status", Verification: txretry.Unresolved},
		{Kind: txretry.CallFinished, Outcome: txretry.Cancelled, Attempts: 0},
		{Kind: txretry.CallFinished, Outcome: txretry.PermanentError, Attempts: 2},
		{Kind: txretry.EventKind(99)},
	} {
		h.obs.Observe(ctx, e)
	}
	if spans := h.spanLines(); len(spans) != 0 {
		t.Errorf("spans %q, want none", spans)
	}
	diff(t, "metrics", h.metrics(t), []string{
		`txretry.attempt.failures{error.type=net.OpError,txretry.class=permanent} 1`,
		`txretry.call.attempts{txretry.outcome=cancelled} count=1 sum=0`,
		`txretry.call.attempts{txretry.outcome=permanent_error} count=1 sum=2`,
		`txretry.call.duration{txretry.outcome=cancelled} count=1 sum=0`,
		`txretry.call.duration{txretry.outcome=permanent_error} count=1 sum=0`,
		`txretry.calls{txretry.outcome=cancelled} 1`,
		`txretry.calls{txretry.outcome=permanent_error} 1`,
		`txretry.commit.verifications{txretry.verification=unresolved,txretry.verifier=xact-status} 1`,
		`txretry.queue.duration{txretry.outcome=cancelled} count=1 sum=0`,
		`txretry.queue.duration{txretry.outcome=permanent_error} count=1 sum=0`,
		`txretry.retries{} 1`,
		`txretry.wait.duration{txretry.outcome=cancelled} count=1 sum=0`,
		`txretry.wait.duration{txretry.outcome=permanent_error} count=1 sum=0`,
	})
}

func TestNewObserverOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []otelretry.Option
	}{
		{"empty db system", []otelretry.Option{otelretry.WithDBSystem("")}},
		{"nil meter provider", []otelretry.Option{otelretry.WithMeterProvider(nil)}},
		{"nil tracer provider", []otelretry.Option{otelretry.WithTracerProvider(nil)}},
		{"nil option", []otelretry.Option{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs, err := otelretry.NewObserver(tt.opts...)
			if !errors.Is(err, txretry.ErrInvalidOption) || obs != nil {
				t.Errorf("NewObserver = %v, %v; want nil, ErrInvalidOption", obs, err)
			}
		})
	}
}

func TestNewObserverGlobalProviders(t *testing.T) {
	obs, err := otelretry.NewObserver(otelretry.WithDBSystem("mariadb"))
	if err != nil {
		t.Fatalf("NewObserver: %v", err)
	}
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	if err := txretry.RunInTx(context.Background(), db, debit, txretry.WithObserver(obs)); err != nil {
		t.Fatalf("RunInTx: %v", err)
	}
}

// A call answered by its idempotency key is not an error on its span, and
// counts under its own outcome.
func TestAlreadyCommittedIsNoError(t *testing.T) {
	h := newHarness(t)
	ctx := h.obs.StartCall(context.Background(), "pay")
	for _, e := range []txretry.Event{
		{Kind: txretry.AttemptStarted, Label: "pay", Attempt: 1},
		{Kind: txretry.CallFinished, Label: "pay", Outcome: txretry.AlreadyCommitted, Attempts: 1},
	} {
		h.obs.Observe(ctx, e)
	}
	diff(t, "spans", h.spanLines(), []string{
		`txretry pay Unset "" {db.operation.name=pay,txretry.attempts=1,txretry.outcome=already_committed,txretry.queued=0,txretry.waited=0}`,
		`  txretry.attempt.started {txretry.attempt=1,txretry.queued=0}`,
	})
	if got := h.counter(t, "txretry.calls", attribute.String("txretry.outcome", "already_committed")); got != 1 {
		t.Errorf("calls with outcome already_committed = %d, want 1", got)
	}
}
