package txretry

import (
	"context"
	"fmt"
	"sync"

	"github.com/txretry/txretry/internal/core"
)

// ContentionManager admits attempts to the database through a FIFO gate
// whose width adapts to conflicts, so that under contention transactions
// queue in order instead of colliding and sleeping blindly, and no caller
// starves. Its width (the number of attempts that may run at once) starts at
// the maximum and halves, never below 1, when an admitted attempt fails with
// a retryable error; it doubles again, up to the maximum, after a streak of
// 16 x width attempts without a conflict. So the gate settles where about one
// attempt in 16 x width conflicts: on a single hot row it stays at 1 or 2
// (about 1.06 attempts per commit), and after a burst of conflicts in an
// otherwise calm workload it is fully open again within a few hundred
// commits. While conflicts are rare the gate is wider than the number of
// callers and costs one uncontended mutex; while they are frequent, callers
// pass one or a few at a time in arrival order.
//
// A caller waits for admission before BEGIN and leaves the gate after COMMIT
// or ROLLBACK: it never waits while holding a transaction, so the gate
// cannot deadlock against the database's own locks. A nested call on a
// handle gated by the same manager does not queue again. Waiting honours the
// call's context, its deadline and its time budget.
//
// A ContentionManager is safe for concurrent use; share one among the calls
// that contend for the same data. By default each database handle (*sql.DB,
// *sql.Conn, *pgxpool.Pool, *pgx.Conn) gets its own, created on first use
// and dropped when the handle is garbage collected.
type ContentionManager struct {
	mu      sync.Mutex
	width   float64
	max     float64
	streak  int // attempts without a conflict since the width last changed
	inUse   int
	waiters []*cmWaiter
}

// cmStreak is how many conflict-free attempts per unit of width double the
// width.
const cmStreak = 16

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

// acquire waits for admission in FIFO order, or until ctx ends.
func (m *ContentionManager) acquire(ctx context.Context) error {
	m.mu.Lock()
	if len(m.waiters) == 0 && float64(m.inUse) < m.width {
		m.inUse++
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
// retryable error.
func (m *ContentionManager) release(conflict bool) {
	m.mu.Lock()
	m.inUse--
	if conflict {
		m.width, m.streak = max(1, m.width/2), 0
	} else if m.streak++; m.streak >= cmStreak*int(m.width) {
		m.width, m.streak = min(m.max, m.width*2), 0
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
