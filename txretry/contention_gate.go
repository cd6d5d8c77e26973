package txretry

// The gate: admission in arrival order, the queue, and the stall watch.
// See contention.md.

import (
	"context"
	"slices"
	"time"
)

// tryAcquire admits at once if the gate has room and nobody is waiting.
func (m *ContentionManager) tryAcquire(t *cmTicket) bool {
	m.mu.Lock()
	m.arrival(&t.arrival)
	ok := m.admitLocked(t)
	m.mu.Unlock()
	return ok
}

// admitLocked admits t at once if the gate has room and nobody is waiting,
// recording the epoch it was admitted at.
func (m *ContentionManager) admitLocked(t *cmTicket) bool {
	if m.max == 0 { // the zero value: as NewContentionManager(0)
		m.width, m.max = 1, DefaultContentionWidth
	}
	if len(m.waiters) == 0 && float64(m.inUse) < m.width {
		m.enterLocked(t)
		return true
	}
	return false
}

// enterLocked takes a place in the gate for t's attempt.
func (m *ContentionManager) enterLocked(t *cmTicket) {
	t.alone = m.inUse == 0
	m.inUse++
	m.admits++
	t.epoch, t.admit = m.epoch, m.admits
}

// arrival numbers a call at its first request for admission; *n is 0 until
// then.
func (m *ContentionManager) arrival(n *uint64) {
	if *n == 0 {
		m.arrived++
		*n = m.arrived
	}
}

// acquire waits for admission in the order the calls arrived (a retry
// goes before every call that arrived after its own), or until ctx ends.
// t numbers the call and records the admission. The caller at the head of
// the queue times, on clock, the stalls that widen the gate (see
// stalledLocked).
func (m *ContentionManager) acquire(ctx context.Context, t *cmTicket, clock Clock) error {
	m.mu.Lock()
	m.arrival(&t.arrival)
	if m.admitLocked(t) {
		m.mu.Unlock()
		return nil
	}
	w := &cmWaiter{ready: make(chan struct{}), head: make(chan struct{}), arrival: t.arrival}
	i := len(m.waiters)
	for i > 0 && m.waiters[i-1].arrival > w.arrival {
		i--
	}
	m.waiters = slices.Insert(m.waiters, i, w)
	m.watchHeadLocked()
	m.mu.Unlock()
	var (
		stall  Timer
		stallC <-chan time.Time
		mark   cmMark
		head   = w.head
	)
	for {
		select {
		case <-w.ready:
			stopTimer(stall)
			t.epoch, t.admit, t.alone = w.admitted.epoch, w.admitted.admit, w.admitted.alone
			return nil
		case <-ctx.Done():
			stopTimer(stall)
			m.mu.Lock()
			if w.granted {
				// Admitted while giving up: pass the place on.
				m.inUse--
				m.grantLocked()
			} else {
				m.waiters = slices.DeleteFunc(m.waiters, func(x *cmWaiter) bool { return x == w })
				m.watchHeadLocked()
			}
			m.mu.Unlock()
			return context.Cause(ctx)
		case <-head: // at the head of the queue: watch for stalls
			head = nil
		case <-stallC:
			m.mu.Lock()
			if m.markLocked() == mark {
				m.stalledLocked(clock.Now())
			}
			granted := w.granted
			m.mu.Unlock()
			if granted {
				continue // ready is closed: the next select returns
			}
		}
		// Watch the next step from what the gate looks like now.
		m.mu.Lock()
		mark = m.markLocked()
		step := m.stallStep()
		m.mu.Unlock()
		stall = clock.NewTimer(step)
		stallC = stall.C()
	}
}

func stopTimer(t Timer) {
	if t != nil {
		t.Stop()
	}
}

// cmMark is what moves in the gate: its width, and the attempts that left.
type cmMark struct{ epoch, left uint64 }

func (m *ContentionManager) markLocked() cmMark { return cmMark{m.epoch, m.left} }

// stallStep is how long the gate may stand still, with callers queued,
// before it widens: cmStallCommits usual commits, at least cmStall.
func (m *ContentionManager) stallStep() time.Duration {
	return max(cmStallCommits*m.avg, cmStall)
}

// watchHeadLocked tells the caller at the head of the queue to watch for
// stalls; a caller that was at the head before a retry went ahead of it
// keeps watching, which does no harm, since a stall widens once per step.
func (m *ContentionManager) watchHeadLocked() {
	if len(m.waiters) > 0 && !m.waiters[0].watching {
		m.waiters[0].watching = true
		close(m.waiters[0].head)
	}
}

// stalledLocked widens a gate that stood still for a step while callers
// queued: no attempt left it and its width did not change. The attempts
// inside may be waiting for the callers outside (as in a test that forces
// a deadlock between two calls), or for something outside the database;
// either way the queue would otherwise wait until its deadlines. During
// slow start the width doubles; after it, the widening is a probe, undone
// as the other widenings are (see the type's documentation).
func (m *ContentionManager) stalledLocked(now time.Time) {
	if len(m.waiters) == 0 || m.width >= m.max || m.pausing > 0 {
		return // a pause keeps the gate still on purpose
	}
	if m.opened && !m.probing {
		m.from, m.probing = m.width, true
	}
	m.setWidth(min(2*m.width, m.max), now)
	m.opened = m.opened || m.width >= m.max
	m.grantLocked()
}

// giveBack leaves the gate without an attempt: the place passes on, and
// nothing is learnt about contention. paused says the caller kept its place
// through a pause that release returned.
func (m *ContentionManager) giveBack(paused bool) {
	m.mu.Lock()
	if paused {
		m.pausing--
	}
	m.inUse--
	m.grantLocked()
	m.mu.Unlock()
}

// resume starts the next attempt of a caller that kept its place through
// a pause.
func (m *ContentionManager) resume(t *cmTicket) {
	m.mu.Lock()
	m.pausing--
	m.inUse--
	m.enterLocked(t)
	m.mu.Unlock()
}

func (m *ContentionManager) grantLocked() {
	for len(m.waiters) > 0 && float64(m.inUse) < m.width {
		w := m.waiters[0]
		m.waiters[0] = nil
		m.waiters = m.waiters[1:]
		w.granted = true
		m.enterLocked(&w.admitted)
		close(w.ready)
	}
	m.watchHeadLocked()
}
