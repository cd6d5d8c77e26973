package txretry

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"reflect"
	"time"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry/internal/core"
)

func init() {
	core.Run = func(ctx context.Context, a core.Adapter, opts any) error {
		o, ok := opts.([]Option)
		if !ok && opts != nil {
			return errors.New("txretry: internal error: options of the wrong type")
		}
		r := newCallState(o, func(r *runner) *runner { return r })
		r.a = a
		return run(ctx, r, o)
	}
}

// newCallState allocates an adapter's per-call state S, whose runner
// runnerOf returns. A call with options also gets the storage its
// configuration is resolved into (the runner's own), in the same
// allocation; a call without shares the defaults and allocates only S.
func newCallState[S any](opts []Option, runnerOf func(*S) *runner) *S {
	if len(opts) == 0 {
		return new(S)
	}
	sc := new(struct {
		s   S
		cfg config
	})
	runnerOf(&sc.s).own = &sc.cfg
	return &sc.s
}

// txCtxKey keys the running transaction in the context handed to fn.
type txCtxKey struct{}

type txCtxVal struct {
	key     any
	tx      core.Tx
	attempt int
	gate    *ContentionManager // the manager this attempt was admitted by, if any
	parent  *txCtxVal          // the enclosing call's attempt, for calls on other handles
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

// run is the engine: attempt, classify, decide, wait or verify, report. r is
// a zero runner but for its adapter and, for a call with options, own: the
// storage its configuration is resolved into. An adapter may embed the
// runner in its own per-call state, allocated by newCallState, so that a
// call costs one allocation for all of them.
func run(ctx context.Context, r *runner, opts []Option) error {
	if ctx == nil {
		return errors.Join(ErrInvalidOption, errors.New("txretry: nil context"))
	}
	a := r.a
	cfg := &defaultConfig
	if len(opts) > 0 {
		cfg = r.own
		if cfg == nil {
			cfg = new(config)
		}
		if err := resolve(cfg, opts); err != nil {
			return err
		}
	}
	r.cfg = cfg
	if err := a.Check(cfg.txOpts); err != nil {
		return err
	}
	// A nested call on the same handle joins the outer transaction and
	// leaves retrying to the outermost call.
	if v, ok := ctx.Value(txCtxKey{}).(*txCtxVal); ok && sameKey(v.key, a.Key()) {
		return a.Call(ctx, v.tx)
	}
	r.cm = cfg.cm
	if !cfg.cmSet {
		r.cm = defaultManager(a)
	}
	if r.cm != nil && holds(ctx, r.cm) {
		r.cm = nil // already admitted by the enclosing call: queueing again would deadlock
	}
	r.parent, _ = ctx.Value(txCtxKey{}).(*txCtxVal)
	return r.run(ctx)
}

type runner struct {
	cfg    *config // resolved once per call (or the shared defaults), then read-only
	own    *config // where a call with options resolves them, if the adapter provides it
	a      core.Adapter
	cm     *ContentionManager
	parent *txCtxVal
	start  time.Time
	waited time.Duration
	queued time.Duration // waiting for the contention manager's admission
	ticket cmTicket      // the call's place in the contention manager's order, and its attempt's admission
	pause  time.Duration // the manager asked for this pause before the next attempt (see release)
	kept   bool          // the call keeps its place in the manager's gate through the pause
	fnCtx  attemptCtx    // the context handed to fn in the first attempt
}

// attemptCtx is the context handed to fn: the caller's context plus the
// running attempt under txCtxKey. It does what context.WithValue would, but
// the first attempt's lives inside the runner instead of costing an
// allocation.
type attemptCtx struct {
	context.Context
	val txCtxVal
}

func (c *attemptCtx) Value(key any) any {
	if _, ok := key.(txCtxKey); ok {
		return &c.val
	}
	return c.Context.Value(key)
}

func (c *attemptCtx) String() string { return "txretry.attemptCtx" }

type resultKind uint8

const (
	resCommitted resultKind = iota
	resRetryable
	resPermanent
	resUncertain
)

type result struct {
	kind  resultKind
	err   error
	state string // verifier's state recorded before COMMIT
}

func (r *runner) run(ctx context.Context) (err error) {
	cfg := r.cfg
	observed := len(cfg.observers) > 0
	if observed || cfg.budget > 0 || r.cm != nil {
		r.start = cfg.clock.Now()
		r.ticket.since = r.start
	}
	deadline, reason := r.deadline(ctx)
	// Attempts are timed for the contention manager, for the deadline
	// check before a retry, and for observers; reading the clock costs
	// enough to skip when none of them needs it.
	timed := r.cm != nil || !deadline.IsZero() || observed
	var (
		last    error
		minDur  time.Duration = -1
		attempt int
		outcome = Panicked
	)
	if observed {
		for _, o := range cfg.observers {
			if cs, ok := o.(CallStarter); ok {
				ctx = cs.StartCall(ctx, cfg.label)
			}
		}
		defer func() {
			r.observe(ctx, Event{Kind: CallFinished, Label: cfg.label, Outcome: outcome, Attempts: attempt,
				Duration: cfg.clock.Now().Sub(r.start), Waited: r.waited, Queued: r.queued})
		}()
	}
	defer func() {
		if r.kept { // gave up during a pause
			r.cm.giveBack(true)
		}
	}()
	for attempt = 1; ; attempt++ {
		if cerr := ctx.Err(); cerr != nil {
			outcome = Cancelled
			attempt--
			if last == nil {
				return cerr
			}
			return &RetryError{Attempts: attempt, Reason: "context", Cause: cerr, Err: last}
		}
		var queued time.Duration
		if r.kept {
			// The call kept its place through the pause.
			r.cm.resume(&r.ticket)
			r.kept = false
		} else if r.cm != nil {
			var q0 time.Time
			if observed {
				q0 = cfg.clock.Now()
			}
			aerr := r.admit(ctx, deadline)
			if observed {
				queued = cfg.clock.Now().Sub(q0)
				r.queued += queued
			}
			if aerr != nil {
				attempt--
				if ctx.Err() == nil { // the deadline or budget passed in the queue
					outcome = Exhausted
					return &RetryError{Attempts: attempt, Reason: reason, Cause: ErrRetriesExhausted, Err: cmp.Or(last, aerr)}
				}
				outcome = Cancelled
				if last == nil {
					return aerr
				}
				return &RetryError{Attempts: attempt, Reason: "context", Cause: aerr, Err: last}
			}
		}
		if attempt > 1 && !deadline.IsZero() && cfg.clock.Now().Add(minDur).After(deadline) {
			// Admitted too late: the wait for admission ran on while
			// another call held the gate or a key, and an attempt as
			// short as the shortest so far would now end after the
			// deadline or the time budget.
			if r.cm != nil {
				r.giveBack()
			}
			attempt--
			outcome = Exhausted
			return &RetryError{Attempts: attempt, Reason: reason, Cause: ErrRetriesExhausted, Err: last}
		}
		if attempt == 1 && cfg.budgetShared != nil {
			cfg.budgetShared.deposit()
		}
		res, dur := r.admitted(ctx, attempt, queued, timed)
		if res.kind != resCommitted {
			r.observeFailure(ctx, attempt, res, dur)
		}
		switch res.kind {
		case resCommitted:
			outcome = Committed
			return nil
		case resPermanent:
			outcome = PermanentError
			return res.err
		case resUncertain:
			if cfg.verifier == nil {
				outcome = CommitUncertain
				return &CommitUncertainError{Attempts: attempt, Err: res.err}
			}
			committed, verr := r.verify(ctx, res.state, deadline)
			if verr != nil {
				outcome = CommitUncertain
				return &CommitUncertainError{Attempts: attempt, Err: res.err, Verifier: cfg.verifier.name(), VerifyErr: verr}
			}
			if committed {
				outcome = Committed
				return nil
			}
		}
		last = res.err
		if attempt >= cfg.maxAttempts {
			outcome = Exhausted
			return &RetryError{Attempts: attempt, Reason: "attempt limit", Cause: ErrRetriesExhausted, Err: last}
		}
		if minDur < 0 || dur < minDur {
			minDur = dur
		}
		var delay time.Duration
		if r.cm == nil || cfg.backoffSet || len(cfg.keys) > 0 {
			// A contention manager's gate spaces retries out by itself;
			// keys do not: a conflict despite them came from elsewhere.
			delay = max(cfg.backoff.Delay(attempt, cfg.rand()), 0)
		}
		if r.kept {
			// The manager saw a conflict with another process: the call
			// pauses in its place, for at most half the time left.
			if !deadline.IsZero() {
				r.pause = min(r.pause, max(deadline.Sub(cfg.clock.Now())-minDur, 0)/2)
			}
			delay = max(delay, r.pause)
		}
		if !deadline.IsZero() && cfg.clock.Now().Add(delay+minDur).After(deadline) {
			outcome = Exhausted
			return &RetryError{Attempts: attempt, Reason: reason, Cause: ErrRetriesExhausted, Err: last}
		}
		if cfg.budgetShared != nil && !cfg.budgetShared.withdraw() {
			outcome = Exhausted
			return &RetryError{Attempts: attempt, Reason: "retry budget", Cause: ErrRetriesExhausted, Err: last}
		}
		if len(cfg.observers) > 0 {
			r.observe(ctx, Event{Kind: RetryScheduled, Label: cfg.label, Attempt: attempt, Delay: delay})
		}
		if werr := r.wait(ctx, delay); werr != nil {
			outcome = Cancelled
			return &RetryError{Attempts: attempt, Reason: "context", Cause: werr, Err: last}
		}
	}
}

func (r *runner) observeFailure(ctx context.Context, attempt int, res result, dur time.Duration) {
	if len(r.cfg.observers) == 0 {
		return
	}
	class := Permanent
	switch res.kind {
	case resRetryable:
		class = Retryable
	case resUncertain:
		class = Uncertain
	}
	r.observe(ctx, Event{Kind: AttemptFailed, Label: r.cfg.label, Attempt: attempt, Class: class,
		Code: errCode(res.err), ErrType: errType(res.err), Duration: dur})
}

// observe hands e to every observer of the call.
func (r *runner) observe(ctx context.Context, e Event) {
	for _, o := range r.cfg.observers {
		o.Observe(ctx, e)
	}
}

// deadline is the earlier of the context's deadline and the time budget.
func (r *runner) deadline(ctx context.Context) (time.Time, string) {
	var d time.Time
	reason := ""
	if r.cfg.budget > 0 {
		d, reason = r.start.Add(r.cfg.budget), "time budget"
	}
	if cd, ok := ctx.Deadline(); ok && (d.IsZero() || cd.Before(d)) {
		d, reason = cd, "deadline"
	}
	return d, reason
}

// admit waits for the contention manager's admission, within ctx and the
// deadline.
func (r *runner) admit(ctx context.Context, deadline time.Time) error {
	keys := r.cfg.keys
	if len(keys) > 0 && r.cm.tryLockKeys(keys) || len(keys) == 0 && r.cm.tryAcquire(&r.ticket) {
		return nil
	}
	if !deadline.IsZero() {
		// The deadline is on the configured clock; a real timer
		// approximates it.
		actx, cancel := context.WithTimeout(ctx, deadline.Sub(r.cfg.clock.Now()))
		defer cancel()
		ctx = actx
	}
	if len(keys) > 0 {
		return r.cm.lockKeys(ctx, keys)
	}
	// A gate stands still in real time: the configured clock, which tests
	// may run faster, does not time it.
	return r.cm.acquire(ctx, &r.ticket, systemClock{})
}

// leave gives back what admit took.
func (r *runner) leave(conflict bool, d time.Duration, now time.Time) {
	if len(r.cfg.keys) > 0 {
		r.cm.unlockKeys(r.cfg.keys)
		return
	}
	// An explicit backoff spaces the retries itself.
	r.pause = r.cm.release(&r.ticket, conflict, d, now, !r.cfg.backoffSet, r.cfg.rand)
	r.kept = r.pause > 0
}

// giveBack gives back what admit took, for an attempt that does not run.
func (r *runner) giveBack() {
	if len(r.cfg.keys) > 0 {
		r.cm.unlockKeys(r.cfg.keys)
		return
	}
	r.cm.giveBack(false)
}

// wait sleeps d on the configured clock, or until ctx ends.
func (r *runner) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t0 := r.cfg.clock.Now()
	t := r.cfg.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		r.waited += r.cfg.clock.Now().Sub(t0)
		return nil
	case <-ctx.Done():
		r.waited += r.cfg.clock.Now().Sub(t0)
		return context.Cause(ctx)
	}
}

// admitted runs one attempt and, with a contention manager, leaves its gate
// afterwards, even when fn panics. dur is how long the attempt took if timed,
// else 0.
func (r *runner) admitted(ctx context.Context, n int, queued time.Duration, timed bool) (res result, dur time.Duration) {
	var t0 time.Time
	if timed {
		t0 = r.cfg.clock.Now()
	}
	if r.cm != nil {
		panicked := true
		defer func() {
			if panicked {
				now := r.cfg.clock.Now()
				r.leave(false, now.Sub(t0), now)
			}
		}()
		r.observeStart(ctx, n, queued)
		res = r.attempt(ctx, n)
		panicked = false
		now := r.cfg.clock.Now()
		dur = now.Sub(t0)
		// An attempt cut short because its caller's context ended (a lock
		// wait that outlived the deadline, typically a deadlock PostgreSQL
		// has not detected yet) is congestion too.
		r.leave(res.kind == resRetryable || (res.kind == resPermanent && ctx.Err() != nil), dur, now)
		return res, dur
	}
	r.observeStart(ctx, n, queued)
	res = r.attempt(ctx, n)
	if timed {
		dur = r.cfg.clock.Now().Sub(t0)
	}
	return res, dur
}

func (r *runner) observeStart(ctx context.Context, n int, queued time.Duration) {
	if len(r.cfg.observers) > 0 {
		r.observe(ctx, Event{Kind: AttemptStarted, Label: r.cfg.label, Attempt: n, Queued: queued})
	}
}

// attempt runs one transaction: BEGIN, fn, COMMIT or ROLLBACK.
func (r *runner) attempt(ctx context.Context, n int) result {
	cfg := r.cfg
	tx, err := r.a.Begin(ctx, cfg.txOpts)
	if err != nil {
		return r.classify(err)
	}
	// The first attempt's context lives in the runner; a retry gets a new
	// one, since goroutines of the previous attempt (database/sql watches a
	// statement's context until its rows are closed) may still read the old.
	actx := &r.fnCtx
	if n > 1 {
		actx = new(attemptCtx)
	}
	*actx = attemptCtx{Context: ctx, val: txCtxVal{key: r.a.Key(), tx: tx, attempt: n, gate: r.cm, parent: r.parent}}
	var fnCtx context.Context = actx
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
			r.rollback(ctx, tx)
		}
	}()
	err = r.a.Call(fnCtx, tx)
	finished = true
	if err != nil {
		if cfg.attemptTimeout > 0 && ctx.Err() == nil && errors.Is(fnCtx.Err(), context.DeadlineExceeded) {
			err = &attemptTimeoutError{err: err}
		}
		r.rollback(ctx, tx)
		return r.classify(err)
	}
	var state string
	if cfg.verifier != nil {
		// Part of committing: like COMMIT, not subject to the caller's
		// cancellation once fn has returned nil.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(fnCtx), cfg.commitTimeout)
		state, err = cfg.verifier.prepare(pctx, tx)
		cancel()
		if err != nil {
			r.rollback(ctx, tx)
			return r.classify(err)
		}
	}
	err = tx.Commit(ctx, cfg.commitTimeout)
	if err == nil {
		return result{kind: resCommitted}
	}
	if !notCommitted(err, r.a.NotCommitted) {
		return result{kind: resUncertain, err: err, state: state}
	}
	return r.classify(err)
}

func (r *runner) classify(err error) result {
	if r.cfg.classify(err) {
		return result{kind: resRetryable, err: err}
	}
	return result{kind: resPermanent, err: err}
}

func (r *runner) rollback(ctx context.Context, tx core.Tx) {
	_ = tx.Rollback(ctx, r.cfg.commitTimeout) // the attempt's own error is what the caller needs
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
func notCommitted(err error, adapterSays func(error) bool) bool {
	if errors.Is(err, driver.ErrBadConn) {
		// database/sql/driver: "ErrBadConn should be returned ... to signal
		// ... that the driver did not perform the operation".
		return true
	}
	if safe, ok := safeToRetry(err); ok && safe {
		// pgconn: nothing was sent to the server.
		return true
	}
	if adapterSays != nil && adapterSays(err) {
		return true
	}
	if code := pgerr.SQLState(err); code != "" {
		return !uncertainSQLState(code)
	}
	if n, ok := mysqlerr.Number(err); ok {
		return rolledBackAtCommit(n)
	}
	return walk(err, func(e error) bool { return e.Error() == pgxCommitRollbackMsg })
}

// pgxCommitRollbackMsg is the text of pgx.ErrTxCommitRollback: the server
// answered COMMIT with ROLLBACK because the transaction had failed. Matched
// by text so that the database/sql path does not import pgx; a test pins it
// to the real value.
const pgxCommitRollbackMsg = "commit unexpectedly resulted in rollback"

// rolledBackAtCommit reports the MySQL/MariaDB/TiDB error numbers whose
// documentation says the transaction was rolled back or not applied when
// COMMIT returns them: a deadlock or a certification failure (1213), Group
// Replication's rollback (3101), a lock wait timeout (1205), a Galera node
// not ready to take the command (1047), a read-only server (1290, 1792),
// TiDB's commit conflicts (8002, 8005, 8022, 9007) and TiDB's schema change
// (8028: TiDB checks the schema before the commit point, before committing
// the primary key or, with async commit and 1PC, before prewrite, and rolls
// back). Every other error
// is uncertain: a killed connection or query (1927, 1317), a shutdown (1053)
// or a storage engine error during COMMIT (1180) can follow a COMMIT that
// was applied.
func rolledBackAtCommit(n uint16) bool {
	switch n {
	case mysqlerr.LockDeadlock, mysqlerr.GroupReplicationRollback, mysqlerr.LockWaitTimeout,
		mysqlerr.UnknownComError, 1290, 1792, // ER_OPTION_PREVENTS_STATEMENT (read_only), ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
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
