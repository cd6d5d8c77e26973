package txretry

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/txretry/txretry/internal/core"
)

// ContentionManager admits attempts to the database through a FIFO gate
// whose width adapts to conflicts, so that under contention transactions
// queue in order instead of colliding and sleeping blindly, and no caller
// starves. Its width (the number of attempts that may run at once) starts at
// the maximum and halves, never below 1, when an admitted attempt fails with
// a retryable error; it doubles again, up to the maximum, after a streak of
// 16 x width attempts without a conflict. A conflict that cost more than a
// usual commit (a deadlock that PostgreSQL detects only after its 1 s
// deadlock_timeout) first has to be paid back: the streak starts only after
// as many commits as the failed attempt lasted in average commit durations.
// So the gate settles where conflicts cost about one attempt in 16 x width:
// on a single hot row it stays at 1 or 2 (about 1.06 attempts per commit),
// and after a burst of conflicts in an otherwise calm workload it is fully
// open again within a few hundred commits. While conflicts are rare the gate is wider than the number of
// callers and costs one uncontended mutex; while they are frequent, callers
// pass one or a few at a time in arrival order.
//
// A caller waits for admission before BEGIN and leaves the gate after COMMIT
// or ROLLBACK: it never waits while holding a transaction, so the gate
// cannot deadlock against the database's own locks. A nested call on a
// handle gated by the same manager does not queue again. Waiting honours the
// call's context, its deadline and its time budget.
//
// A ContentionManager is safe for concurrent use, and its zero value is
// ready to use, like NewContentionManager(0); share one among the calls
// that contend for the same data. By default each database handle (*sql.DB,
// *sql.Conn, *pgxpool.Pool, *pgx.Conn) gets its own, created on first use
// and dropped when the handle is garbage collected.
type ContentionManager struct {
	mu      sync.Mutex
	width   float64
	max     float64
	streak  int           // attempts without a conflict since the width last changed
	debt    int           // commits to go before the streak counts again
	avg     time.Duration // moving average of committed attempts' durations
	inUse   int
	waiters []*cmWaiter
}

// cmStreak is how many conflict-free attempts per unit of width double the
// width; cmMaxDebt caps what one conflict can cost.
const (
	cmStreak  = 16
	cmMaxDebt = 100_000
)

type cmWaiter struct {
	ready   chan struct{}
	granted bool
}

// DefaultContentionWidth is the maximum width of a ContentionManager made by
// default or by NewContentionManager(0).
const DefaultContentionWidth = 64

// NewContentionManager returns a manager whose gate is at most maxWidth wide
// (0 means DefaultContentionWidth). A negative maxWidth returns an error
// matching ErrInvalidOption.
func NewContentionManager(maxWidth int) (*ContentionManager, error) {
	if maxWidth < 0 {
		return nil, fmt.Errorf("%w: NewContentionManager(%d): width must not be negative", ErrInvalidOption, maxWidth)
	}
	if maxWidth == 0 {
		maxWidth = DefaultContentionWidth
	}
	return &ContentionManager{width: float64(maxWidth), max: float64(maxWidth)}, nil
}

// Width returns the gate's current width, for observation and tests.
func (m *ContentionManager) Width() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.width
}

// Queued returns how many callers wait for admission now.
func (m *ContentionManager) Queued() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waiters)
}

// tryAcquire admits at once if the gate has room and nobody is waiting.
func (m *ContentionManager) tryAcquire() bool {
	m.mu.Lock()
	ok := m.admitLocked()
	m.mu.Unlock()
	return ok
}

func (m *ContentionManager) admitLocked() bool {
	if m.max == 0 { // the zero value: as NewContentionManager(0)
		m.width, m.max = DefaultContentionWidth, DefaultContentionWidth
	}
	if len(m.waiters) == 0 && float64(m.inUse) < m.width {
		m.inUse++
		return true
	}
	return false
}

// acquire waits for admission in FIFO order, or until ctx ends.
func (m *ContentionManager) acquire(ctx context.Context) error {
	m.mu.Lock()
	if m.admitLocked() {
		m.mu.Unlock()
		return nil
	}
	w := &cmWaiter{ready: make(chan struct{})}
	m.waiters = append(m.waiters, w)
	m.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		if w.granted {
			// Admitted while giving up: pass the place on.
			m.inUse--
			m.grantLocked()
		} else {
			for i, x := range m.waiters {
				if x == w {
					m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
					break
				}
			}
		}
		m.mu.Unlock()
		return context.Cause(ctx)
	}
}

// release leaves the gate; conflict says the attempt failed with a
// retryable error, d is how long the attempt took.
func (m *ContentionManager) release(conflict bool, d time.Duration) {
	m.mu.Lock()
	m.inUse--
	switch {
	case conflict:
		m.width, m.streak = max(1, m.width/2), 0
		if m.avg > 0 {
			m.debt = int(min(int64(m.debt)+int64(d/m.avg), cmMaxDebt))
		}
	case m.avg == 0:
		m.avg = max(d, 1)
	default:
		m.avg = max(m.avg+(d-m.avg)/16, 1)
	}
	if !conflict {
		if m.debt > 0 {
			m.debt--
		} else if m.streak++; m.streak >= cmStreak*int(m.width) {
			m.width, m.streak = min(m.max, m.width*2), 0
		}
	}
	m.grantLocked()
	m.mu.Unlock()
}

func (m *ContentionManager) grantLocked() {
	for len(m.waiters) > 0 && float64(m.inUse) < m.width {
		w := m.waiters[0]
		m.waiters[0] = nil
		m.waiters = m.waiters[1:]
		w.granted = true
		m.inUse++
		close(w.ready)
	}
}

// WithContentionManager routes the call's attempts through m, typically one
// manager shared by the calls of one operation (for example per label).
// Default: a manager per database handle (see ContentionManager).
func WithContentionManager(m *ContentionManager) Option {
	return func(c *config) {
		if m == nil {
			c.fail("WithContentionManager(nil): use WithoutContentionManager to turn it off")
			return
		}
		c.cm, c.cmSet = m, true
	}
}

// WithoutContentionManager lets every attempt go straight to the database,
// relying on the backoff alone.
func WithoutContentionManager() Option {
	return func(c *config) { c.cm, c.cmSet = nil, true }
}

// managers holds the default manager of each database handle, keyed by a
// weak pointer so that a handle that is garbage collected takes its manager
// with it.
var managers sync.Map // weak key -> *ContentionManager

// defaultManager returns the manager of the adapter's handle, creating it on
// first use, or nil if the handle has no scope.
func defaultManager(a core.Adapter) *ContentionManager {
	key := a.Scope()
	if key == nil {
		return nil
	}
	if m, ok := managers.Load(key); ok {
		return m.(*ContentionManager)
	}
	m, _ := NewContentionManager(0)
	actual, loaded := managers.LoadOrStore(key, m)
	if !loaded {
		a.OnCollect(func() { managers.Delete(key) })
	}
	return actual.(*ContentionManager)
}
