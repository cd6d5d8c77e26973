package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/txretry/txretry/txretry"
)

// runnerKind says how a runner runs a call.
type runnerKind uint8

const (
	kindTxretry  runnerKind = iota // txretry.RunInTx / pgxretry.RunInTx
	kindLoop                       // hand-written retry loop (loopPolicy)
	kindCenkalti                   // cenkalti/backoff/v5 Retry with its defaults
)

// runner is a retry policy selectable with -runners. Adding a variant is one
// entry in allRunners.
type runner struct {
	name string
	kind runnerKind
	// workers overrides -workers when positive (serial: 1).
	workers int
	// opts returns the txretry options of one run (kindTxretry), after
	// WithIsolation(the conn's isolation); called once per run, so that
	// options holding state (managers, budgets) start fresh. nil: none.
	opts func() ([]txretry.Option, error)
	// loop is the policy of a hand-written loop (kindLoop).
	loop loopPolicy
}

// loopPolicy is a hand-written retry loop: up to attempts attempts, waiting
// delay(retry, rnd) before retry number retry (1-based); nil delay: no wait.
type loopPolicy struct {
	attempts int
	delay    func(retry int, rnd float64) time.Duration
}

// allRunners is every runner, in report order.
var allRunners = []runner{
	{name: "txretry", kind: kindTxretry},
	{name: "txretry-nocm", kind: kindTxretry, opts: options(txretry.WithoutContentionManager())},
	{name: "txretry-budget", kind: kindTxretry, opts: retryBudget(0.2, 10)},
	{name: "txretry-nolocktimeout", kind: kindTxretry, opts: options(txretry.WithLockTimeout(0))},
	{name: "txretry-locktimeout", kind: kindTxretry, opts: options(txretry.WithLockTimeout(txretry.DefaultLockTimeout))},
	{name: "once", kind: kindLoop, loop: loopPolicy{attempts: 1}},
	{name: "immediate", kind: kindLoop, loop: loopPolicy{attempts: 10}},
	{name: "fixed10ms", kind: kindLoop, loop: loopPolicy{attempts: 10, delay: constantDelay(10 * time.Millisecond)}},
	{name: "jitter", kind: kindLoop, loop: loopPolicy{attempts: 10, delay: fullJitter(2*time.Millisecond, 200*time.Millisecond)}},
	{name: "cenkalti", kind: kindCenkalti},
	{name: "serial", kind: kindTxretry, workers: 1},
}

// options returns fixed txretry options.
func options(opts ...txretry.Option) func() ([]txretry.Option, error) {
	return func() ([]txretry.Option, error) { return opts, nil }
}

// retryBudget returns txretry's defaults plus a fresh retry budget per run
// (ratio 0.2 and 10 a second are Finagle's defaults).
func retryBudget(ratio, perSecond float64) func() ([]txretry.Option, error) {
	return func() ([]txretry.Option, error) {
		b, err := txretry.NewRetryBudget(ratio, perSecond, nil)
		if err != nil {
			return nil, err
		}
		return []txretry.Option{txretry.WithRetryBudget(b)}, nil
	}
}

func constantDelay(d time.Duration) func(int, float64) time.Duration {
	return func(int, float64) time.Duration { return d }
}

// fullJitter waits a uniform fraction of min(ceiling, base*2^(retry-1)).
func fullJitter(base, ceiling time.Duration) func(int, float64) time.Duration {
	return func(retry int, rnd float64) time.Duration {
		d := ceiling
		if retry < 31 && base<<(retry-1) < ceiling {
			d = base << (retry - 1)
		}
		return time.Duration(rnd * float64(d))
	}
}

// worker is one closed-loop client of a run.
type worker struct {
	idx  int
	c    conn
	wl   *workloadRun
	r    *runner
	opts []txretry.Option // kindTxretry
	// classOpts are opts plus, when the workload labels its classes,
	// WithLabel(the class's name), per class (kindTxretry).
	classOpts [nClasses][]txretry.Option
	rnd       *rand.Rand  // jitter of hand-written loops
	timer     *time.Timer // waits of hand-written loops, reused
	st        stats

	attempts int // attempts of the current txretry call, from the observer
	// finished: the current txretry call's CallFinished event was
	// observed; queued is its Queued.
	finished bool
	queued   time.Duration
	// began is when the body of the current txretry call's committing
	// attempt started; zero when the call did not commit through txretry.
	began time.Time
}

func newWorker(idx int, c conn, wl *workloadRun, r *runner, runOpts []txretry.Option, seed uint64) *worker {
	w := &worker{idx: idx, c: c, wl: wl, r: r, st: newStats()}
	switch r.kind {
	case kindTxretry:
		w.opts = make([]txretry.Option, 0, len(runOpts)+2)
		w.opts = append(w.opts, txretry.WithIsolation(c.isolation()))
		w.opts = append(w.opts, runOpts...)
		w.opts = append(w.opts, txretry.WithObserver(txretry.ObserverFunc(w.observe)))
		for cl := range nClasses {
			w.classOpts[cl] = w.opts
			if wl.spec.labels {
				w.classOpts[cl] = append(slices.Clip(w.opts), txretry.WithLabel(classNames[cl]))
			}
		}
	case kindLoop:
		w.rnd = rand.New(rand.NewPCG(seed, uint64(idx)+1<<40))
		w.timer = time.NewTimer(time.Hour)
		w.timer.Stop()
	}
	return w
}

// observe counts a txretry call's failed attempts by code; txretry calls it
// on the worker's goroutine.
func (w *worker) observe(_ context.Context, e txretry.Event) {
	switch e.Kind {
	case txretry.AttemptFailed:
		code := e.Code
		if code == "" {
			code = "none"
		}
		w.st.codes[code]++
	case txretry.CallFinished:
		w.attempts = e.Attempts
		w.finished, w.queued = true, e.Queued
	}
}

// loop runs calls until end (or until ctx ends), each under its own
// deadline: the closed loop.
func (w *worker) loop(ctx context.Context, start <-chan struct{}, end *time.Time, deadline time.Duration) {
	<-start
	stop := *end
	for seq := 0; ctx.Err() == nil; seq++ {
		t0 := time.Now()
		if !t0.Before(stop) {
			return
		}
		w.run(ctx, callID(w.idx, seq), t0, stop, deadline)
	}
}

// serve runs the calls of queue, each timed and under its deadline from its
// arrival, calling done after each: a server of the open loop. A call that
// arrives after ctx ended is skipped.
func (w *worker) serve(ctx context.Context, start <-chan struct{}, end *time.Time, deadline time.Duration, queue <-chan arrival, done func()) {
	<-start
	stop := *end
	for a := range queue {
		if ctx.Err() == nil {
			w.st.wait += max(0, time.Since(a.at))
			w.run(ctx, a.id, a.at, stop, deadline)
		}
		done()
	}
}

// run makes call id, which started (or arrived) at t0, with its deadline
// from t0, in a run that ends at stop, and records it.
func (w *worker) run(ctx context.Context, id int64, t0, stop time.Time, deadline time.Duration) {
	cl := w.wl.classOf(id)
	cctx, cancel := context.WithDeadline(ctx, t0.Add(deadline))
	out, attempts, err := w.call(cctx, cl, id)
	cancel()
	fin := time.Now()
	if out == outOther && w.st.otherSample == "" {
		w.st.otherSample = txretry.Describe(err)
	}
	w.st.record(id, cl, out, attempts, t0, fin, stop, deadline)
	w.st.addWindow(w.began, fin, stop)
	if w.finished {
		w.st.addQueued(cl, w.queued)
	}
}

// call runs call id, of class cl, with the worker's runner.
func (w *worker) call(ctx context.Context, cl callClass, id int64) (outcome, int, error) {
	body := w.wl.body(id)
	switch w.r.kind {
	case kindTxretry:
		w.attempts, w.finished = 0, false
		var began time.Time
		err := w.c.runTxretry(ctx, cl, w.wl.spec.methodValues, func(ctx context.Context, q querier) error {
			began = time.Now()
			return body(ctx, q)
		}, w.classOpts[cl])
		w.began = time.Time{}
		if err == nil {
			w.began = began
		}
		return classifyTxretry(ctx, err), w.attempts, err
	case kindCenkalti:
		return w.cenkalti(ctx, body)
	default:
		return w.handLoop(ctx, body)
	}
}

// classifyTxretry maps txretry's result to an outcome.
func classifyTxretry(ctx context.Context, err error) outcome {
	if err == nil {
		return outCommitted
	}
	if errors.Is(err, txretry.ErrCommitUncertain) {
		return outUncertain
	}
	if re, ok := errors.AsType[*txretry.RetryError](err); ok {
		if re.Reason == "deadline" || re.Reason == "context" {
			return outDeadline
		}
		return outExhausted
	}
	if ctx.Err() != nil {
		return outDeadline
	}
	return outOther
}

// failed records a peer's failed attempt and returns the outcome if the call
// must stop: uncertain at COMMIT, or not retryable.
func (w *worker) failed(ctx context.Context, ph phase, err error) (outcome, bool) {
	w.st.codes[w.c.code(err)]++
	switch {
	case ph == phaseCommit && !w.c.notCommitted(err):
		return outUncertain, true
	case w.c.retryable(err):
		return 0, false
	case ctx.Err() != nil:
		return outDeadline, true
	default:
		return outOther, true
	}
}

// handLoop is the hand-written retry loop of the peers.
func (w *worker) handLoop(ctx context.Context, body txBody) (outcome, int, error) {
	p := w.r.loop
	for a := 1; ; a++ {
		ph, err := w.c.attempt(ctx, body)
		if err == nil {
			return outCommitted, a, nil
		}
		if out, stop := w.failed(ctx, ph, err); stop {
			return out, a, err
		}
		if a >= p.attempts {
			return outExhausted, a, err
		}
		if p.delay != nil {
			if d := p.delay(a, w.rnd.Float64()); d > 0 {
				w.timer.Reset(d)
				select {
				case <-w.timer.C:
				case <-ctx.Done():
					w.timer.Stop()
					return outDeadline, a, err
				}
			}
		}
		if ctx.Err() != nil {
			return outDeadline, a, err
		}
	}
}

// cenkalti runs the call with backoff.Retry and its defaults (exponential
// from 500 ms, factor 1.5, ±50 %, up to 15 minutes: here the deadline ends
// it), retrying only what the driver's classifier calls retryable.
func (w *worker) cenkalti(ctx context.Context, body txBody) (outcome, int, error) {
	attempts := 0
	out := outExhausted
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		attempts++
		ph, err := w.c.attempt(ctx, body)
		if err == nil {
			return struct{}{}, nil
		}
		if o, stop := w.failed(ctx, ph, err); stop {
			out = o
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	})
	switch {
	case err == nil:
		return outCommitted, attempts, nil
	case out == outExhausted && ctx.Err() != nil:
		return outDeadline, attempts, err
	default:
		return out, attempts, err
	}
}
