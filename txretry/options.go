package txretry

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"
)

// Defaults of the options. Each option's documentation repeats its default.
const (
	// DefaultMaxAttempts is the attempt limit, the first attempt included.
	// It is a guard against a loop, not the bound of a call's time (that
	// is the context's deadline or WithTimeBudget): when several processes
	// contend for one row, a call may lose many rounds in a row to the
	// process that holds the data: with 8 processes a limit of 10 failed
	// 0.4-1.1% of the calls that their 1 s deadline would have let commit,
	// and 50 still failed a few calls in ten thousand (see contention.md).
	DefaultMaxAttempts = 100
	// DefaultCommitTimeout bounds COMMIT (and ROLLBACK) once fn has returned.
	DefaultCommitTimeout = 10 * time.Second
	// DefaultVerifyTimeout bounds the verification of an uncertain commit.
	DefaultVerifyTimeout = 30 * time.Second
	// DefaultLockTimeout is pgxretry.RunInTx's WithLockTimeout: long
	// enough for a lock held by a transaction that is committing, far
	// shorter than PostgreSQL's 1 s deadlock_timeout.
	DefaultLockTimeout = 50 * time.Millisecond
)

// An Option configures one call of RunInTx (or pgxretry.RunInTx). Options
// are resolved once per call into an immutable configuration, so one Option
// value may be shared by any number of concurrent calls.
type Option func(*config)

// config is the resolved, immutable configuration of one call.
type config struct {
	err            error
	maxAttempts    int
	backoff        Backoff
	budget         time.Duration
	attemptTimeout time.Duration
	commitTimeout  time.Duration
	verifyTimeout  time.Duration
	txOpts         TxOptions     // txOpts.LockTimeout: lockTimeout's, for attempt 1
	lockTimeout    time.Duration // WithLockTimeout; lockTimeoutAuto: armed by the manager
	classify       func(error) bool
	clock          Clock
	rand           func() float64
	verifier       verifier
	idem           *idemKey // WithIdempotencyKey; also the verifier
	observers      []Observer
	label          string
	domain         string // WithConflictDomain; "": the label's, else fn's
	cm             *ContentionManager
	noCM           bool // WithoutContentionManager
	budgetShared   *RetryBudget
	connLoss       bool // WithRetryOnConnectionLoss
}

// isNil reports a nil interface or an interface holding a nil pointer,
// func, map or similar, which would panic on first use.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// lockTimeoutAuto: no WithLockTimeout; the handle's manager arms
// DefaultLockTimeout after long lock waits (see WithLockTimeout).
const lockTimeoutAuto time.Duration = -1

// defaultConfig is the configuration of every call without options: shared,
// so never written.
var defaultConfig = config{
	maxAttempts:   DefaultMaxAttempts,
	backoff:       defaultBackoff,
	commitTimeout: DefaultCommitTimeout,
	verifyTimeout: DefaultVerifyTimeout,
	lockTimeout:   lockTimeoutAuto,
	classify:      DefaultClassifier,
	clock:         systemClock{},
	rand:          rand.Float64,
}

// resolve fills c from the defaults and opts, and makes every check that
// involves more than one option.
func resolve(c *config, opts []Option) error {
	*c = defaultConfig
	for _, o := range opts {
		if o == nil {
			c.fail("nil Option")
			continue
		}
		o(c)
	}
	c.txOpts.LockTimeout = max(c.lockTimeout, 0)
	if c.idem != nil && c.verifier != verifier(c.idem) {
		c.fail("WithIdempotencyKey with another verifier (%s): the key verifies lost commits itself", c.verifier.name())
	}
	if c.idem != nil && c.txOpts.ReadOnly {
		c.fail("WithIdempotencyKey with WithReadOnly: the key is written in the transaction")
	}
	return c.err
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
	}
}

// WithMaxAttempts limits the number of attempts, the first one included:
// WithMaxAttempts(1) never retries. n < 1 makes the call return an error
// matching ErrInvalidOption before any attempt. Default: DefaultMaxAttempts (100).
func WithMaxAttempts(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.fail("WithMaxAttempts(%d): n counts the first attempt and must be at least 1", n)
			return
		}
		c.maxAttempts = n
	}
}

// WithBackoff sets the wait before a retry that no contention gate spaces:
// every retry without a manager (WithoutContentionManager), and the
// retries of a domain whose gate is open (see
// ContentionManager). A retry of a domain whose gate is closed queues at
// the gate instead. Default: DefaultBackoff(), full jitter over an
// exponential delay from 2 ms capped at 250 ms.
func WithBackoff(b Backoff) Option {
	return func(c *config) {
		if isNil(b) {
			c.fail("WithBackoff(nil)")
			return
		}
		c.backoff = b
	}
}

// positive is an option setting the duration field chosen by at to d, which
// must be positive.
func positive(name string, d time.Duration, at func(*config) *time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("%s(%v): must be positive", name, d)
			return
		}
		*at(c) = d
	}
}

// WithTimeBudget bounds the whole call, waits included: no attempt or wait
// is started that cannot finish within d of the call's start, judging by the
// shortest attempt of this call so far (an attempt admitted by the
// contention manager is checked again once admitted); the call then returns
// the last retryable error wrapped in a *RetryError (ErrRetriesExhausted,
// reason "time budget"). On a pool, an attempt's BEGIN, with the wait for
// a pooled or a new connection, ends with what is left of d (the call then
// returns the same way); an attempt's lock timeout (WithLockTimeout) is no
// longer than what is left; fn's own statements are not cut. The caller's
// context deadline is honoured the same way (reason "deadline"). d must be
// positive. Default: no budget beyond the context's deadline and the
// attempt limit.
func WithTimeBudget(d time.Duration) Option {
	return positive("WithTimeBudget", d, func(c *config) *time.Duration { return &c.budget })
}

// WithAttemptTimeout bounds each call of fn: the context fn receives expires
// d after BEGIN returned, when fn is called (BEGIN and the wait for a pooled
// connection are bounded by the caller's context alone). An attempt cut short this way fails with an
// error matching ErrAttemptTimeout and context.DeadlineExceeded, which is not
// retried by default. COMMIT is bounded by WithCommitTimeout instead. d must
// be positive. Default: none.
func WithAttemptTimeout(d time.Duration) Option {
	return positive("WithAttemptTimeout", d, func(c *config) *time.Duration { return &c.attemptTimeout })
}

// WithCommitTimeout bounds COMMIT once fn has returned nil, and ROLLBACK.
// COMMIT does not observe the caller's context (a cancellation must not turn
// a commit into an uncertain one); this timeout is what bounds it. A COMMIT
// cut short by it is uncertain. d must be positive. Default:
// DefaultCommitTimeout (10 s). With go-sql-driver/mysql, which ignores
// contexts during COMMIT, only the DSN's readTimeout bounds COMMIT.
func WithCommitTimeout(d time.Duration) Option {
	return positive("WithCommitTimeout", d, func(c *config) *time.Duration { return &c.commitTimeout })
}

// WithVerifyTimeout bounds the verification of one uncertain commit (all its
// tries together). d must be positive. Default: DefaultVerifyTimeout (30 s),
// and never past the time budget or the caller's context.
func WithVerifyTimeout(d time.Duration) Option {
	return positive("WithVerifyTimeout", d, func(c *config) *time.Duration { return &c.verifyTimeout })
}

// WithLockTimeout ends each lock wait of an attempt after d, and retries the
// attempt, on PostgreSQL transactions run at SERIALIZABLE or REPEATABLE READ
// (WithIsolation). Each attempt it ends doubles the call's timeout (up to
// an hour), so a lock held for long is still taken after a few attempts,
// while the attempts that lost to serialization failures keep d. d = 0
// turns it off; a negative d makes the call return ErrInvalidOption.
//
// Why: PostgreSQL looks for deadlocks only after a lock wait has lasted
// deadlock_timeout (1 s by default, a superuser setting), so transactions
// that take row locks in different orders, as transfers between accounts
// do, hold each other for a second, longer than most callers wait. At
// these two levels a lock wait rarely pays anyway: when the holder commits
// a change to the row, the waiter fails with a serialization failure. A
// short lock timeout turns the deadlock into a retry (see contention.md,
// "Deadlocks on PostgreSQL").
//
// What is retried: 55P03 raised by the lock timeout that the attempt set
// (pgerr.IsLockTimeout), not NOWAIT's 55P03, which is returned as it is;
// a lock_timeout that fn sets itself replaces the attempt's and is then
// retried like it. The adapter applies it: pgxretry sends it with BEGIN at
// no cost; RunInTx over database/sql (and sqlxretry, gormretry and
// bunretry, through BeginSQLOn) sends SET LOCAL as a statement of its own
// after BEGIN, with pgx's stdlib driver or lib/pq, ignores it on MySQL and
// MariaDB, which find deadlocks as they form, and rejects it with
// ErrInvalidOption for another driver.
//
// Default: pgxretry.RunInTx DefaultLockTimeout (50 ms). RunInTx, the
// adapters above and txretry.Run, where the statement would cost a round
// trip on every attempt: none until the handle's contention manager sees an attempt of
// at least DefaultLockTimeout end in a serialization failure (40001), a
// deadlock (40P01) or its caller's context (an attempt the timeout would
// have cost no more, typically one that waited for a row lock), then
// DefaultLockTimeout until a minute has passed without such an attempt or
// a lock timeout. A hot row arms it too, and then pays the round trip (a
// tenth of its goodput over database/sql in contention.md's runs): pass
// WithLockTimeout(0) where transactions cannot deadlock.
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("WithLockTimeout(%v): d must not be negative (0 turns it off)", d)
			return
		}
		c.lockTimeout = d
	}
}

// WithIsolation sets the isolation level of every attempt's transaction,
// for both adapters. Default: sql.LevelDefault, the server's default (READ
// COMMITTED on PostgreSQL, REPEATABLE READ on MySQL and MariaDB).
// pgxretry supports LevelDefault, LevelReadUncommitted, LevelReadCommitted,
// LevelRepeatableRead and LevelSerializable.
func WithIsolation(level sql.IsolationLevel) Option {
	return func(c *config) {
		if level < sql.LevelDefault || level > sql.LevelLinearizable {
			c.fail("WithIsolation(%d): unknown isolation level", int(level))
			return
		}
		c.txOpts.Isolation = level
	}
}

// WithReadOnly makes every attempt's transaction read-only. Default: read-write.
func WithReadOnly() Option {
	return func(c *config) { c.txOpts.ReadOnly = true }
}

// WithClassifier replaces the default classifier: retryable reports whether
// an error from fn or from COMMIT calls for a new attempt. It must be safe
// for concurrent use. Default: DefaultClassifier. It is not consulted for
// commit errors that leave the outcome unknown (see ErrCommitUncertain).
func WithClassifier(retryable func(err error) bool) Option {
	return func(c *config) {
		if retryable == nil {
			c.fail("WithClassifier(nil)")
			return
		}
		c.classify = retryable
	}
}

// WithRetryOn extends the classifier in force (the default one unless
// WithClassifier came first): an error is retryable if the classifier or any
// of the given functions says so. For example,
// WithRetryOn(pgerr.IsLockNotAvailable, mysqlerr.IsLockWaitTimeout).
func WithRetryOn(retryable ...func(err error) bool) Option {
	return func(c *config) {
		for _, f := range retryable {
			if f == nil {
				c.fail("WithRetryOn: nil function")
				return
			}
		}
		prev := c.classify
		c.classify = func(err error) bool {
			if prev(err) {
				return true
			}
			for _, f := range retryable {
				if f(err) {
					return true
				}
			}
			return false
		}
	}
}

// WithClock sets the clock used for waits between attempts, the time
// budget, the durations that observers see and the contention manager's
// pace and lock-timeout memory; meant for deterministic tests. A closed
// gate that admits nobody for a while widens on real time whatever the
// clock (see ContentionManager), and a wait at a gate or for keys ends at
// the deadline measured on a real timer. Default: the system clock.
func WithClock(clk Clock) Option {
	return func(c *config) {
		if isNil(clk) {
			c.fail("WithClock(nil)")
			return
		}
		c.clock = clk
	}
}

// WithRand sets the random source of the backoff's jitter: a function
// returning values uniformly distributed in [0, 1). It must be safe for
// concurrent use if the Option is shared. Default: math/rand/v2's Float64.
func WithRand(float64 func() float64) Option {
	return func(c *config) {
		if float64 == nil {
			c.fail("WithRand(nil)")
			return
		}
		c.rand = float64
	}
}

// WithConflictDomain names the call's conflict domain in the contention
// manager: the calls with one name queue together when they conflict,
// apart from every other domain, whatever their function or label. It
// names the domain apart from WithLabel, which observers also use as a
// metric attribute: a name made at run time (per tenant, per hot row)
// multiplies domains here, at most 1024 a manager (the calls of any
// further domain share one), and no metric's series. The name is the one
// a label would give: WithConflictDomain("transfer") and
// WithLabel("transfer") share a domain. Default: the WithLabel name, else
// the function fn (see ContentionManager). An empty name returns
// ErrInvalidOption.
func WithConflictDomain(name string) Option {
	return func(c *config) {
		if name == "" {
			c.fail("WithConflictDomain(\"\"): a domain needs a name")
			return
		}
		c.domain = name
	}
}

// WithLabel names the operation (for example "transfer"), for observers,
// logs and metrics, and as the call's conflict domain in the contention
// manager: calls with one label queue together when they conflict, apart
// from every other domain unless WithConflictDomain names another.
// Default: empty (the domain is fn's, see ContentionManager).
func WithLabel(label string) Option {
	return func(c *config) { c.label = label }
}
