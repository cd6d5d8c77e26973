package otelretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/txretry/txretry"
	"github.com/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/otelretry"
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
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0`,
			},
			wantSpans: []string{
				`txretry transfer Unset "" {db.operation.name=transfer,db.system.name=postgresql,txretry.attempts=1,txretry.outcome=committed,txretry.waited=0}`,
				`  txretry.attempt.started {txretry.attempt=1}`,
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
				`txretry.retries{db.operation.name=transfer,db.system.name=postgresql} 2`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0.01`,
			},
			wantSpans: []string{
				`txretry transfer Unset "" {db.operation.name=transfer,db.system.name=postgresql,txretry.attempts=3,txretry.outcome=committed,txretry.waited=0.01}`,
				`  txretry.attempt.started {txretry.attempt=1}`,
				`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=retryable,txretry.duration=0}`,
				`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0.005}`,
				`  txretry.attempt.started {txretry.attempt=2}`,
				`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=2,txretry.class=retryable,txretry.duration=0}`,
				`  txretry.retry.scheduled {txretry.attempt=2,txretry.delay=0.005}`,
				`  txretry.attempt.started {txretry.attempt=3}`,
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
				`txretry.retries{db.operation.name=transfer,db.system.name=postgresql} 1`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=exhausted} count=1 sum=0.005`,
			},
			wantSpans: []string{
				`txretry transfer Error "exhausted" {db.operation.name=transfer,db.response.status_code=40001,db.system.name=postgresql,error.type=40001,txretry.attempts=2,txretry.outcome=exhausted,txretry.waited=0.005}`,
				`  txretry.attempt.started {txretry.attempt=1}`,
				`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=retryable,txretry.duration=0}`,
				`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0.005}`,
				`  txretry.attempt.started {txretry.attempt=2}`,
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
				`txretry.retries{db.operation.name=transfer,db.system.name=postgresql} 1`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=permanent_error} count=1 sum=0.005`,
			},
			wantSpans: []string{
				`txretry transfer Error "permanent_error" {db.operation.name=transfer,db.response.status_code=23505,db.system.name=postgresql,error.type=23505,txretry.attempts=2,txretry.outcome=permanent_error,txretry.waited=0.005}`,
				`  txretry.attempt.started {txretry.attempt=1}`,
				`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=retryable,txretry.duration=0}`,
				`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0.005}`,
				`  txretry.attempt.started {txretry.attempt=2}`,
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
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=uncertain} count=1 sum=0`,
			},
			wantSpans: []string{
				`txretry transfer Error "uncertain" {db.operation.name=transfer,db.response.status_code=08006,db.system.name=postgresql,error.type=08006,txretry.attempts=1,txretry.outcome=uncertain,txretry.waited=0}`,
				`  txretry.attempt.started {txretry.attempt=1}`,
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
				`txretry.retries{db.operation.name=transfer,db.system.name=postgresql} 1`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=committed} count=1 sum=0.005`,
			},
			wantSpans: []string{
				`txretry transfer Unset "" {db.operation.name=transfer,db.system.name=postgresql,txretry.attempts=2,txretry.outcome=committed,txretry.waited=0.005}`,
				`  txretry.attempt.started {txretry.attempt=1}`,
				`  txretry.attempt.failed {db.response.status_code=08006,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=uncertain,txretry.duration=0}`,
				`  txretry.commit.verified {txretry.verification=not_committed,txretry.verifier=callback}`,
				`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0.005}`,
				`  txretry.attempt.started {txretry.attempt=2}`,
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
				`txretry.retries{db.operation.name=transfer,db.system.name=postgresql} 1`,
				`txretry.wait.duration{db.operation.name=transfer,db.system.name=postgresql,txretry.outcome=cancelled} count=1 sum=0`,
			},
			wantSpans: []string{
				`txretry transfer Error "cancelled" {db.operation.name=transfer,db.system.name=postgresql,error.type=cancelled,txretry.attempts=1,txretry.outcome=cancelled,txretry.waited=0}`,
				`  txretry.attempt.started {txretry.attempt=1}`,
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
				txretry.WithClock(&stillClock{now: time.Unix(0, 0)}),
				txretry.WithBackoff(txretry.Constant(5 * time.Millisecond)),
				txretry.WithObserver(h.obs),
			}, tt.opts...)
			_ = txretry.RunInTx(ctx, db, debit, opts...)

			diff(t, "metrics", h.metrics(t), tt.wantMetrics)
			diff(t, "spans", h.spanLines(), tt.wantSpans)
		})
	}
}

func TestConcurrentCallsWithOwnContexts(t *testing.T) {
	h := newHarness(t)
	d := &fakedb.Driver{OnExec: func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
		if n%2 == 1 {
			return serialization
		}
		return nil
	}}
	db := d.DB()
	defer db.Close()
	const calls = 16
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
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
		if s.Name != "txretry" {
			t.Errorf("span name %q, want %q", s.Name, "txretry")
		}
		for _, a := range s.Attributes {
			if a.Key == otelretry.SharedContextKey {
				t.Errorf("span %v has %v", s.SpanContext.SpanID(), a)
			}
		}
		for _, e := range s.Events {
			switch e.Name {
			case otelretry.EventAttemptFailed:
				failed++
			case otelretry.EventAttemptStarted:
				started++
			}
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

func TestCallsSharingAContext(t *testing.T) {
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
	opts := []txretry.Option{txretry.WithObserver(h.obs), txretry.WithLabel("shared")}

	errA := make(chan error, 1)
	go func() { errA <- txretry.RunInTx(ctx, db, debit, opts...) }()
	<-inA
	// Call B starts while A is in flight, then A finishes while B is in
	// flight: neither span can be trusted after B started.
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
	// Once no call is in flight on the context, spans work again.
	if err := txretry.RunInTx(ctx, db, debit, opts...); err != nil {
		t.Fatalf("RunInTx: %v", err)
	}

	diff(t, "spans", h.spanLines(), []string{
		`txretry shared Unset "" {db.operation.name=shared,txretry.shared_context=true}`,
		`  txretry.attempt.started {txretry.attempt=1}`,
		`txretry shared Unset "" {db.operation.name=shared,txretry.attempts=1,txretry.outcome=committed,txretry.waited=0}`,
		`  txretry.attempt.started {txretry.attempt=1}`,
	})
	if got := h.counter(t, "txretry.calls", otelretry.OutcomeKey.String("committed")); got != 3 {
		t.Errorf("txretry.calls{committed} = %d, want 3", got)
	}
}

func TestPanickedCall(t *testing.T) {
	h := newHarness(t)
	d := &fakedb.Driver{OnExec: failExecs(serialization)}
	db := d.DB()
	defer db.Close()
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want boom", r)
			}
		}()
		_ = txretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
			if txretry.Attempt(ctx) == 2 {
				panic("boom")
			}
			return debit(ctx, tx)
		}, txretry.WithObserver(h.obs), txretry.WithBackoff(txretry.Constant(0)),
			txretry.WithClock(&stillClock{}))
	}()
	diff(t, "spans", h.spanLines(), []string{
		`txretry Error "panicked" {error.type=panicked,txretry.attempts=2,txretry.outcome=panicked,txretry.waited=0}`,
		`  txretry.attempt.started {txretry.attempt=1}`,
		`  txretry.attempt.failed {db.response.status_code=40001,error.type=fakedb.SQLStateError,txretry.attempt=1,txretry.class=retryable,txretry.duration=0}`,
		`  txretry.retry.scheduled {txretry.attempt=1,txretry.delay=0}`,
		`  txretry.attempt.started {txretry.attempt=2}`,
	})
}

// listCtx is a context whose dynamic type cannot key a map.
type listCtx struct {
	context.Context
	_ []int
}

func TestUnhashableContext(t *testing.T) {
	h := newHarness(t)
	db := (&fakedb.Driver{OnExec: failExecs(serialization)}).DB()
	defer db.Close()
	err := txretry.RunInTx(listCtx{Context: context.Background()}, db, debit,
		txretry.WithObserver(h.obs), txretry.WithBackoff(txretry.Constant(0)))
	if err != nil {
		t.Fatalf("RunInTx: %v", err)
	}
	if spans := h.spanLines(); len(spans) != 0 {
		t.Errorf("spans %q, want none", spans)
	}
	if got := h.counter(t, "txretry.retries"); got != 1 {
		t.Errorf("txretry.retries = %d, want 1", got)
	}
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
