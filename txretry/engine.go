package txretry

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
)

// txCtxKey keys the running attempt in the context handed to fn.
type txCtxKey struct{}

type txCtxVal struct {
	key     any // the adapter's Handle
	tx      Tx
	attempt int
	gate    *ContentionManager // the manager this attempt was admitted by, if any
	parent  *txCtxVal          // the enclosing call's attempt, for calls on other handles
	after   attemptHooks       // AfterCommit's, registered by fn
	// joined is set on the value a nested call puts in its fn's context
	// when it joined a call that is not the innermost one (see enter): it
	// copies that call's key, tx, attempt and gate, and AfterCommit
	// registers with it.
	joined *txCtxVal
}

// self is the attempt v stands for: its own, or the one it joined.
func (v *txCtxVal) self() *txCtxVal {
	if v.joined != nil {
		return v.joined
	}
	return v
}

// callOn returns the attempt of the nearest call on handle h that ctx is
// inside, anywhere in the chain of enclosing calls, nil for none (and for
// a nil ctx or h). It is the one answer to "which transaction is current
// on h": a nested call on h joins it, and TxFromContext (so every TxOrDB)
// returns its transaction.
func callOn(ctx context.Context, h any) *txCtxVal {
	if ctx == nil || h == nil {
		return nil
	}
	v, _ := ctx.Value(txCtxKey{}).(*txCtxVal)
	for ; v != nil; v = v.parent {
		if sameKey(v.key, h) {
			return v
		}
	}
	return nil
}

// holds reports whether ctx is inside an attempt admitted by m.
func holds(ctx context.Context, m *ContentionManager) bool {
	v, _ := ctx.Value(txCtxKey{}).(*txCtxVal)
	for ; v != nil; v = v.parent {
		if v.gate == m {
			return true
		}
	}
	return false
}

// Attempt returns the 1-based number of the attempt running fn, from the
// context that RunInTx passed to fn; 0 for any other context. A nested call
// that joined an outer transaction reports the outer attempt.
func Attempt(ctx context.Context) int {
	if ctx == nil {
		return 0
	}
	if v, ok := ctx.Value(txCtxKey{}).(*txCtxVal); ok {
		return v.attempt
	}
	return 0
}

func sameKey(a, b any) bool {
	if a == nil || b == nil {
		return false
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// enter is the engine's entry, behind Run: it checks the call, then joins
// an enclosing call's transaction on the same handle or runs the call's
// retry loop.
func enter(ctx context.Context, a adapter, opts []Option) error {
	if ctx == nil {
		return errors.Join(ErrInvalidOption, errors.New("txretry: nil context"))
	}
	h, hasHandle := a.handle()
	if hasHandle && isNil(h) {
		return fmt.Errorf("%w: nil database handle (%T)", ErrInvalidOption, h)
	}
	cfg := &defaultConfig // shared by the calls without options, so never written
	if len(opts) > 0 {
		cfg = new(config)
		if err := resolve(cfg, opts); err != nil {
			return err
		}
	}
	if err := a.check(cfg.txOpts); err != nil {
		return err
	}
	// A nested call joins the nearest enclosing call on the same handle,
	// even with calls on other handles in between (the transaction
	// TxOrDB returns), and leaves retrying to the outermost call.
	inner, _ := ctx.Value(txCtxKey{}).(*txCtxVal)
	outer := callOn(ctx, h)
	if err := checkIdempotency(cfg, outer != nil); err != nil {
		return err
	}
	if outer != nil {
		if outer != inner {
			// fn's context names the joined call as the innermost, so
			// that Attempt and AfterCommit in fn are that call's, and
			// keeps the calls in between in the chain.
			ctx = context.WithValue(ctx, txCtxKey{}, &txCtxVal{key: outer.key, tx: outer.tx, attempt: outer.attempt,
				gate: outer.gate, parent: inner, joined: outer.self()})
		}
		return a.join(ctx, outer.tx)
	}
	cm := managerOf(a, cfg, h)
	if cm != nil && holds(ctx, cm) {
		cm = nil // already admitted by the enclosing call: queueing again would deadlock
	}
	c := &call{cfg: cfg, a: a, key: h, cm: cm, parent: inner, minDur: -1}
	if err := c.loop(ctx); err != nil {
		return err
	}
	runAfterCommit(ctx, c.hooks) // the loop returns nil only after a commit
	return nil
}

// admissionOf is a call's standing with its manager cm (nil: none): the
// gate of its domain, named by WithConflictDomain, its label or fn.
func admissionOf(cm *ContentionManager, cfg *config, a adapter, start, end time.Time) admission {
	if cm == nil {
		return nil
	}
	k := domainKey(cmp.Or(cfg.domain, cfg.label), a.fn())
	return &cmTurn{m: cm, d: cm.domain(k), key: k, lease: a.leaser(), since: start, end: end, rand: cfg.rand}
}

// managerOf returns the contention manager of a call: the one chosen by an
// option, else the handle's default one.
func managerOf(a adapter, cfg *config, h any) *ContentionManager {
	if cfg.noCM || cfg.cm != nil {
		return cfg.cm
	}
	if m, ok := a.manager(); ok {
		return m
	}
	return ManagerFor(h)
}

// call is one call's state while its attempts run.
type call struct {
	cfg      *config // resolved once per call (or the shared defaults), then read-only
	a        adapter
	key      any                // the adapter's Handle, to which nested calls join
	cm       *ContentionManager // arms the lock timeout; nested calls inside its attempts do not queue again
	adm      admission          // the call's standing with cm; nil: none
	parent   *txCtxVal
	start    time.Time
	deadline time.Time     // the earlier of the context's deadline and the time budget; zero if neither
	reason   string        // why the deadline is there: "deadline" or "time budget"
	minDur   time.Duration // the shortest attempt so far; -1 before the first
	waited   time.Duration // between attempts
	queued   time.Duration // waiting for the contention manager's admission
	pause    time.Duration // the manager asked for this pause, in the call's place, before the next attempt
	spaced   bool          // the manager spaces the next attempt: no backoff
	// lockTimeouts counts the attempts that WithLockTimeout's timeout
	// ended; each doubles the next attempt's.
	lockTimeouts int
	connLosses   int // attempts in a row that lost their connection (WithRetryOnConnectionLoss)

	// hooks are AfterCommit's, of the last attempt whose fn returned nil.
	hooks *afterCommit
	last  error // the last failed attempt's error

	commitLost bool // txretrytest reported a COMMIT of the call lost (see commit)
}

type resultKind uint8

const (
	resCommitted resultKind = iota
	resRetryable
	resPermanent
	resUncertain
	resAlready // the idempotency key is already committed
	resSpent   // the time budget ended before BEGIN did
)

// result is one attempt's outcome.
type result struct {
	kind     resultKind
	err      error
	state    string // verifier's state recorded before COMMIT
	connLost bool   // resRetryable: the connection was lost before COMMIT (WithRetryOnConnectionLoss)
}

// neutral reports an outcome that is neither a commit nor a conflict, for
// the contention manager: an uncertain COMMIT, a key that another call
// committed, a BEGIN that the time budget ended, a lost connection.
func (r result) neutral() bool {
	return r.kind == resUncertain || r.kind == resAlready || r.kind == resSpent || r.connLost
}

// loop is the retry loop: admit, attempt, classify, decide, wait or
// verify, report.
func (c *call) loop(ctx context.Context) error {
	cfg := c.cfg
	c.start = cfg.clock.Now()
	c.deadline, c.reason = c.deadlineOf(ctx)
	c.adm = admissionOf(c.cm, cfg, c.a, c.start, c.deadline)
	attempt, outcome := 0, Panicked
	if len(cfg.observers) > 0 {
		for _, o := range cfg.observers {
			if cs, ok := o.(CallStarter); ok {
				ctx = cs.StartCall(ctx, cfg.label)
			}
		}
		defer func() {
			c.observe(ctx, Event{Kind: CallFinished, Label: cfg.label, Outcome: outcome, Attempts: attempt,
				Duration: cfg.clock.Now().Sub(c.start), Waited: c.waited, Queued: c.queued})
		}()
	}
	if c.adm != nil {
		defer c.adm.cancel() // gave up during a pause
	}
	for attempt = 1; ; attempt++ {
		// Admit.
		queued, next := c.admit(ctx, attempt)
		if next.end {
			attempt--
			outcome = next.outcome
			return next.err
		}

		// Attempt and classify.
		res, dur := c.attempt(ctx, attempt, queued)
		if res.kind != resCommitted && res.kind != resAlready {
			c.observeFailure(ctx, attempt, res, dur)
		}

		// Decide, verify.
		next = c.decide(res, attempt, dur)
		if next.verify {
			next = c.verified(ctx, res, attempt, dur)
		}
		if next.end {
			outcome = next.outcome
			return next.err
		}

		// Wait.
		if len(cfg.observers) > 0 {
			c.observe(ctx, Event{Kind: RetryScheduled, Label: cfg.label, Attempt: attempt, Delay: next.delay})
		}
		if werr := c.wait(ctx, next.delay); werr != nil {
			outcome = Cancelled
			return &RetryError{Attempts: attempt, Reason: "context", Cause: werr, Err: c.last}
		}
	}
}

// step is what the loop does next: end the call with outcome and err,
// verify an uncertain COMMIT, or retry after delay.
type step struct {
	end     bool
	outcome Outcome
	err     error
	verify  bool
	delay   time.Duration
}

func stop(o Outcome, err error) step { return step{end: true, outcome: o, err: err} }

// exhausted ends the call after attempts for a limit named by reason.
func (c *call) exhausted(attempts int, reason string, err error) step {
	return stop(Exhausted, &RetryError{Attempts: attempts, Reason: reason, Cause: ErrRetriesExhausted, Err: err})
}

// admit lets attempt n in: the caller still waits, the contention manager
// admits it, and one as short as the shortest so far still fits before
// the deadline or the time budget. It returns how long the call queued,
// or how the call ends instead.
func (c *call) admit(ctx context.Context, n int) (time.Duration, step) {
	if cerr := ctx.Err(); cerr != nil {
		return 0, stop(Cancelled, cancelled(n-1, cerr, c.last))
	}
	queued, aerr := c.queue(ctx)
	if aerr != nil {
		if ctx.Err() == nil { // the deadline or budget passed in the queue
			return 0, c.exhausted(n-1, c.reason, cmp.Or(c.last, aerr))
		}
		return 0, stop(Cancelled, cancelled(n-1, aerr, c.last))
	}
	if c.pastDeadline(0) {
		// Admitted too late: the wait for admission ran on while other
		// calls held the gate (for a first attempt, until no time was
		// left at all).
		if c.adm != nil {
			c.adm.cancel()
		}
		return 0, c.exhausted(n-1, c.reason, cmp.Or(c.last, context.DeadlineExceeded))
	}
	if n == 1 && c.cfg.budgetShared != nil {
		c.cfg.budgetShared.deposit()
	}
	return queued, step{}
}

// decide says what follows attempt n, which ended with res after dur: the
// call ends (committed, a permanent error, a limit), an uncertain COMMIT
// is verified, or the call retries after a delay.
func (c *call) decide(res result, n int, dur time.Duration) step {
	cfg := c.cfg
	switch res.kind {
	case resCommitted:
		return stop(Committed, nil)
	case resPermanent:
		return stop(PermanentError, res.err)
	case resAlready:
		return stop(AlreadyCommitted, ErrAlreadyCommitted)
	case resSpent:
		return c.exhausted(n, c.reason, cmp.Or(c.last, res.err))
	case resUncertain:
		if cfg.verifier == nil {
			return stop(CommitUncertain, &CommitUncertainError{Attempts: n, Err: res.err})
		}
		return step{verify: true}
	}
	c.last = res.err
	if n >= cfg.maxAttempts {
		return c.exhausted(n, "attempt limit", c.last)
	}
	if c.minDur < 0 || dur < c.minDur {
		c.minDur = dur
	}
	delay := c.delay(n, res.connLost)
	if c.pastDeadline(delay) {
		return c.exhausted(n, c.reason, c.last)
	}
	if cfg.budgetShared != nil && !cfg.budgetShared.withdraw() {
		return c.exhausted(n, "retry budget", c.last)
	}
	return step{delay: delay}
}

// verified verifies attempt n's uncertain COMMIT (res) and decides again:
// committed ends the call, not committed is retried like a retryable
// error, and no answer ends the call uncertain.
func (c *call) verified(ctx context.Context, res result, n int, dur time.Duration) step {
	committed, verr := c.verify(ctx, res.state)
	switch {
	case verr != nil:
		return stop(CommitUncertain, &CommitUncertainError{Attempts: n, Err: res.err, Verifier: c.cfg.verifier.name(), VerifyErr: verr})
	case committed:
		return stop(Committed, nil)
	}
	return c.decide(result{kind: resRetryable, err: res.err}, n, dur)
}

// cancelled is the error of a call whose context ended before an attempt.
func cancelled(attempts int, cause, last error) error {
	if last == nil {
		return cause
	}
	return &RetryError{Attempts: attempts, Reason: "context", Cause: cause, Err: last}
}

// pastDeadline reports whether a wait of d and then an attempt as short as
// the shortest so far would end after the deadline or the time budget.
func (c *call) pastDeadline(d time.Duration) bool {
	return !c.deadline.IsZero() && c.cfg.clock.Now().Add(d+c.minDur).After(c.deadline)
}

// delay is the wait before the attempt after attempt, connLost when that
// attempt lost its connection: a Backoff's delay, and the manager's pause.
func (c *call) delay(attempt int, connLost bool) time.Duration {
	cfg := c.cfg
	b, n := cfg.backoff, attempt
	switch {
	case connLost:
		// The server is away, not busy: neither the backoff nor the
		// manager's spacing is about that.
		c.connLosses++
		b, n = connLossBackoff, c.connLosses
	case c.spaced:
		b = nil // a domain's gate spaces its retries by itself
	}
	if !connLost {
		c.connLosses = 0
	}
	var d time.Duration
	if b != nil {
		d = max(b.Delay(n, cfg.rand()), 0)
	}
	if c.pause > 0 {
		// The manager spaces the retry (an open domain's spacing, or a
		// closed gate's pace after a conflict with another process), for
		// at most half the time left.
		if !c.deadline.IsZero() {
			c.pause = min(c.pause, max(c.deadline.Sub(cfg.clock.Now())-c.minDur, 0)/2)
		}
		d = max(d, c.pause)
	}
	return d
}

func (c *call) observeFailure(ctx context.Context, attempt int, res result, dur time.Duration) {
	if len(c.cfg.observers) == 0 {
		return
	}
	class := Permanent
	switch res.kind {
	case resRetryable:
		class = Retryable
		if res.connLost {
			class = ConnectionLost
		}
	case resUncertain:
		class = Uncertain
	}
	c.observe(ctx, Event{Kind: AttemptFailed, Label: c.cfg.label, Attempt: attempt, Class: class,
		Code: errCode(res.err), ErrType: errType(res.err), Duration: dur})
}

// observe hands e to every observer of the call.
func (c *call) observe(ctx context.Context, e Event) {
	for _, o := range c.cfg.observers {
		o.Observe(ctx, e)
	}
}

// deadlineOf is the earlier of the context's deadline and the time budget.
func (c *call) deadlineOf(ctx context.Context) (time.Time, string) {
	var d time.Time
	reason := ""
	if c.cfg.budget > 0 {
		d, reason = c.start.Add(c.cfg.budget), "time budget"
	}
	if cd, ok := ctx.Deadline(); ok && (d.IsZero() || cd.Before(d)) {
		d, reason = cd, "deadline"
	}
	return d, reason
}

// queue waits for the contention manager's admission, within ctx and the
// deadline, and returns how long it waited.
func (c *call) queue(ctx context.Context) (time.Duration, error) {
	if c.adm == nil {
		return 0, nil
	}
	t0 := c.cfg.clock.Now()
	limit := time.Duration(-1)
	if !c.deadline.IsZero() {
		limit = max(c.deadline.Sub(t0), 0)
	}
	waited, err := c.adm.enter(ctx, limit)
	if !waited {
		return 0, err
	}
	queued := c.cfg.clock.Now().Sub(t0)
	c.queued += queued
	return queued, err
}

// wait sleeps d on the configured clock, or until ctx ends.
func (c *call) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t0 := c.cfg.clock.Now()
	t := c.cfg.clock.NewTimer(d)
	defer t.Stop()
	defer func() { c.waited += c.cfg.clock.Now().Sub(t0) }()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// attempt runs attempt n inside the contention manager's admission, and
// gives the admission back afterwards, even when fn panics. dur is how long
// the attempt took.
func (c *call) attempt(ctx context.Context, n int, queued time.Duration) (res result, dur time.Duration) {
	t0 := c.cfg.clock.Now()
	ended := false // stays false while fn panics
	if c.cm != nil {
		timeouts := c.lockTimeouts
		defer func() {
			now := c.cfg.clock.Now()
			dur = now.Sub(t0)
			if !ended || res.neutral() {
				// Neither a commit nor a conflict: the manager learns
				// nothing from it, and the call gives its place back.
				c.pause = 0
				c.adm.cancel()
				return
			}
			// An attempt cut short because its caller's context ended (a
			// lock wait that outlived the deadline, typically a deadlock
			// PostgreSQL has not detected yet) is congestion too.
			cut := res.kind == resPermanent && ctx.Err() != nil
			c.cm.noteAttempt(res.err, cut, dur, c.lockTimeouts > timeouts, now)
			c.pause, c.spaced = c.adm.done(res.kind == resRetryable || cut, now)
		}()
	}
	if len(c.cfg.observers) > 0 {
		c.observe(ctx, Event{Kind: AttemptStarted, Label: c.cfg.label, Attempt: n, Queued: queued})
	}
	res = c.transaction(ctx, n)
	ended = true
	if res.connLost && ctx.Err() != nil {
		// The caller's end broke the connection: returned as without
		// WithRetryOnConnectionLoss.
		res = result{kind: resPermanent, err: res.err}
	}
	dur = c.cfg.clock.Now().Sub(t0)
	return res, dur
}

// transaction runs one transaction: BEGIN, fn, COMMIT or ROLLBACK.
func (c *call) transaction(ctx context.Context, n int) result {
	cfg := c.cfg
	opts := c.attemptOptions()
	tx, err := c.begin(ctx, opts)
	if err != nil {
		return c.classify(err, opts)
	}
	if cfg.idem != nil {
		already, err := cfg.idem.claim(ctx, tx)
		if already || err != nil {
			c.rollback(ctx, tx)
			if already {
				return result{kind: resAlready}
			}
			return c.classify(err, opts)
		}
	}
	val := &txCtxVal{key: c.key, tx: tx, attempt: n, gate: c.cm, parent: c.parent}
	fnCtx := context.WithValue(ctx, txCtxKey{}, val)
	if cfg.attemptTimeout > 0 {
		var cancel context.CancelFunc
		fnCtx, cancel = context.WithTimeout(fnCtx, cfg.attemptTimeout)
		defer cancel()
	}
	finished := false
	defer func() {
		if !finished {
			// fn panicked (or called runtime.Goexit): roll back and let the
			// panic go on with its original value.
			c.rollback(ctx, tx)
		}
	}()
	err = c.a.call(fnCtx, tx)
	if err == nil {
		err = injectedConflict(ctx, n) // txretrytest's, nil outside tests
	}
	finished = true
	c.hooks = val.after.end(err == nil)
	if err != nil {
		if cfg.attemptTimeout > 0 && ctx.Err() == nil && errors.Is(fnCtx.Err(), context.DeadlineExceeded) {
			err = &attemptTimeoutError{err: err}
		}
		c.rollback(ctx, tx)
		return c.classify(err, opts)
	}
	var state string
	if cfg.verifier != nil {
		// Part of committing: like COMMIT, not subject to the caller's
		// cancellation once fn has returned nil.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(fnCtx), cfg.commitTimeout)
		state, err = cfg.verifier.prepare(pctx, tx)
		cancel()
		if err != nil {
			c.rollback(ctx, tx)
			return c.classify(err, opts)
		}
	}
	if c.adm != nil {
		c.adm.committing()
	}
	err = c.commit(ctx, tx)
	if err == nil {
		return result{kind: resCommitted}
	}
	if !notCommitted(err) {
		return result{kind: resUncertain, err: err, state: state}
	}
	return c.classify(err, opts)
}

// begin begins the attempt's transaction. Under a time budget, BEGIN and
// the wait for a pooled connection (or for a new one to open) end with
// what is left of it, as they end with the context's deadline: an attempt
// that cannot even begin within the budget is not run. Not on a handle of
// one connection, which has no pool to wait for, and whose driver would
// close the connection it cannot replace to abandon BEGIN.
func (c *call) begin(ctx context.Context, opts TxOptions) (Tx, error) {
	if c.reason != "time budget" || c.a.singleConn() {
		return c.a.begin(ctx, opts)
	}
	bctx, cancel := context.WithTimeoutCause(ctx, max(c.deadline.Sub(c.cfg.clock.Now()), 0), errBudgetSpent)
	defer cancel()
	tx, err := c.a.begin(bctx, opts)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(bctx), errBudgetSpent) {
		return nil, &budgetSpentError{err: err}
	}
	return tx, err
}

// errBudgetSpent is the cause of a BEGIN that the time budget ended.
var errBudgetSpent = errors.New("txretry: time budget spent before BEGIN returned")

// budgetSpentError is BEGIN's error when the time budget ended it.
type budgetSpentError struct{ err error }

func (e *budgetSpentError) Error() string   { return errBudgetSpent.Error() + ": " + Describe(e.err) }
func (e *budgetSpentError) Unwrap() []error { return []error{context.DeadlineExceeded, e.err} }

// attemptOptions are the next attempt's transaction options: the call's,
// with WithLockTimeout's timeout doubled for each of the call's attempts
// that it ended, on the isolation levels where a lock wait rarely pays,
// and no longer than what is left before the deadline or the time budget
// (a lock wait must not carry an attempt past it).
func (c *call) attemptOptions() TxOptions {
	o := c.cfg.txOpts
	if c.cfg.lockTimeout == lockTimeoutAuto && c.cm != nil && c.cm.lockTimeoutArmed(c.cfg.clock.Now()) {
		o.LockTimeout = DefaultLockTimeout
	}
	switch o.Isolation {
	case sql.LevelSerializable, sql.LevelRepeatableRead, sql.LevelSnapshot:
		for i := 0; i < c.lockTimeouts && o.LockTimeout > 0 && o.LockTimeout < time.Hour; i++ {
			o.LockTimeout *= 2
		}
	default:
		o.LockTimeout = 0
	}
	if o.LockTimeout > 0 && !c.deadline.IsZero() {
		// At least a millisecond: 0 would turn the lock timeout off.
		o.LockTimeout = min(o.LockTimeout, max(c.deadline.Sub(c.cfg.clock.Now()), time.Millisecond))
	}
	return o
}

// classify classifies an attempt's error: retryable if the classifier
// says so, or if it is the lock timeout the attempt set itself.
func (c *call) classify(err error, opts TxOptions) result {
	var spent *budgetSpentError
	if errors.As(err, &spent) {
		return result{kind: resSpent, err: err}
	}
	if opts.LockTimeout > 0 && pgerr.IsLockTimeout(err) {
		c.lockTimeouts++
		return result{kind: resRetryable, err: err}
	}
	if c.cfg.classify(err) {
		return result{kind: resRetryable, err: err}
	}
	if c.cfg.connLoss && !c.a.singleConn() && connectionLost(err) {
		// A handle of one connection is left out: that connection is
		// gone and does not come back.
		return result{kind: resRetryable, err: err, connLost: true}
	}
	return result{kind: resPermanent, err: err}
}

func (c *call) rollback(ctx context.Context, tx Tx) {
	_ = tx.Rollback(ctx, c.cfg.commitTimeout) // the attempt's own error is what the caller needs
}

type attemptTimeoutError struct{ err error }

func (e *attemptTimeoutError) Error() string {
	return "txretry: attempt timed out: " + Describe(e.err)
}

func (e *attemptTimeoutError) Unwrap() []error {
	return []error{ErrAttemptTimeout, context.DeadlineExceeded, e.err}
}

// DefaultClassifier reports the errors retried by default: PostgreSQL
// SQLSTATE 40001 (serialization_failure, also CockroachDB's and YugabyteDB's
// restart error) and 40P01 (deadlock_detected), and MySQL/MariaDB error 1213
// (ER_LOCK_DEADLOCK, also Galera certification failures and TiDB pessimistic
// deadlocks), anywhere in err's tree (%w wrapping and errors.Join).
func DefaultClassifier(err error) bool {
	return pgerr.IsRetryable(err) || mysqlerr.IsRetryable(err)
}

// notCommitted reports whether a COMMIT error proves that nothing was
// committed. Everything it does not prove is uncertain.
func notCommitted(err error) bool {
	if errors.Is(err, ErrNotCommitted) {
		// The adapter knows its driver's answer (see NotCommitted).
		return true
	}
	// driver.ErrBadConn proves nothing here: lib/pq returns it after
	// sending COMMIT. The database/sql adapter marks it where its driver's
	// source shows that nothing was sent (see SQLTx.Commit).
	if safe, ok := safeToRetry(err); ok && safe {
		// pgconn: nothing was sent to the server.
		return true
	}
	if code := pgerr.SQLState(err); code != "" {
		return !uncertainSQLState(code)
	}
	if n, ok := mysqlerr.Number(err); ok {
		return rolledBackAtCommit(n)
	}
	return false
}

// rolledBackAtCommit reports the MySQL/MariaDB/TiDB error numbers whose
// documentation says the transaction was rolled back or not applied when
// COMMIT returns them: a deadlock or a certification failure (1213), Group
// Replication's rollback (3101), a lock wait timeout (1205), a Galera node
// not ready to take the command (1047), a read-only server (1290, 1792),
// MySQL's disconnection of a session idle past wait_timeout (4031: sent
// before the server read COMMIT, and the session's transaction rolled
// back), TiDB's commit conflicts (8002, 8005, 8022, 9007) and TiDB's schema
// change (8028: TiDB checks the schema before the commit point, before
// committing the primary key or, with async commit and 1PC, before
// prewrite, and rolls back). Every other error
// is uncertain: a killed connection or query (1927, 1317), a shutdown (1053)
// or a storage engine error during COMMIT (1180) can follow a COMMIT that
// was applied.
func rolledBackAtCommit(n uint16) bool {
	switch n {
	case mysqlerr.LockDeadlock, mysqlerr.GroupReplicationRollback, mysqlerr.LockWaitTimeout,
		mysqlerr.UnknownComError, mysqlerr.OptionPreventsStatement, mysqlerr.ReadOnlyTransaction,
		mysqlerr.ClientInteractionTimeout,
		mysqlerr.TiDBForUpdateCantRetry, mysqlerr.TiDBWriteConflictInTiDB, mysqlerr.TiDBTxnRetryable, mysqlerr.TiDBWriteConflict,
		mysqlerr.TiDBInfoSchemaChanged:
		return true
	}
	return false
}

// uncertainSQLState reports server-reported codes at COMMIT that leave the
// outcome unknown: the server says so (40003, 08007), a connection exception
// (class 08), or an interruption that can arrive after the commit record was
// written (administrator or crash shutdown, query cancel).
func uncertainSQLState(code string) bool {
	switch code {
	case pgerr.StatementCompletionUnknown, pgerr.TransactionResolutionUnknown,
		pgerr.AdminShutdown, pgerr.CrashShutdown, pgerr.CannotConnectNow, pgerr.QueryCanceled:
		return true
	}
	return len(code) == 5 && code[:2] == "08"
}

// safeToRetry finds the first error in the tree with pgconn's
// SafeToRetry() bool method.
func safeToRetry(err error) (safe, found bool) {
	walk(err, func(e error) bool {
		if s, ok := e.(interface{ SafeToRetry() bool }); ok {
			safe, found = s.SafeToRetry(), true
			return true
		}
		return false
	})
	return safe, found
}
