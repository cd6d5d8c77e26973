package txretry

// The width controller: what an attempt's end teaches the gate. See
// contention.md for its states and the measurements behind its constants.

import (
	"math"
	"time"
)

// cmWindow counts what happened at the current width since it was set or
// last judged.
type cmWindow struct {
	start     time.Time
	n, commit int
	conflicts int
}

// release leaves the gate; conflict says the attempt failed with a
// retryable error, d is how long the attempt took, t is the attempt's
// admission, rnd (nil: none) jitters the pause. When pace is set and the
// conflict came from another process (see paceLocked), it returns a pause: the caller
// keeps its place in the gate, waits that long, and then either starts its
// next attempt through resume or gives the place back through
// giveBack(true).
func (m *ContentionManager) release(t *cmTicket, conflict bool, d time.Duration, now time.Time, pace bool, rnd func() float64) (pause time.Duration) {
	d = max(d, 0) // calls sharing a manager may use different clocks (WithClock)
	m.mu.Lock()
	if pace {
		pause = m.paceLocked(t, conflict, now, rnd)
	}
	if pause > 0 {
		m.pausing++
	} else {
		m.inUse--
	}
	m.judge(conflict, now)
	// The rate is a moving average over attempt time, not attempts: each
	// attempt weighs as many average commits as it lasted, so that it
	// estimates the share of the gate's time lost to conflicts. It spans
	// cmRateWindow commits, or 16 generations of attempts (16 x width
	// commits) at a gate wider than 4: 64 commits of a gate 16 wide pass
	// in 4 commit times, where a cluster of conflicts that one commit set
	// off would halve the width on its own.
	weight := 1.0
	if m.avg > 0 {
		weight = min(float64(d)/float64(m.avg), cmRateWindow)
	}
	x := 0.0
	if conflict {
		x = 1
	}
	m.rate += (x - m.rate) * weight / (cmRateWindow * max(1, m.width/4))
	m.left++
	slow := !m.opened
	switch {
	case conflict && !slow && (m.rate <= cmMaxRate || t.epoch < m.cut && weight <= cmCheap):
		// Tolerated: no widening for a while. A cheap conflict of an
		// attempt admitted before the width last narrowed does not narrow
		// it again: like TCP, which halves its window at most once per
		// round trip, the gate halves at most once per generation of
		// attempts, or the attempts still running at the wider width would
		// each halve it again. An expensive one (a deadlock found after
		// 1 s) still does, as TCP's timeouts do: waiting a generation per
		// halving would cost a second each.
		m.streak = 0
	case conflict:
		m.opened = true
		if m.probing {
			m.undo(now)
		} else {
			m.narrow(max(1, m.width/2), now)
		}
		if m.avg > 0 {
			m.debt = int(min(int64(m.debt)+int64(d/m.avg), cmMaxDebt))
		}
	case m.avg == 0:
		m.avg = max(d, 1)
	default:
		m.avg = max(m.avg+(d-m.avg)/16, 1)
	}
	if !conflict {
		if slow {
			// Slow start (see the type's documentation): double after a
			// generation without a conflict; the first conflict ends it
			// in the case above.
			m.streak++
			if m.streak >= int(m.width) {
				m.setWidth(min(2*m.width, m.max), now)
				m.opened = m.width >= m.max
			}
		} else if m.debt > 0 {
			m.debt--
		} else {
			m.streak++
			need := cmStreak * int(m.width)
			if m.probing && m.streak >= need && m.win.conflicts == 0 {
				m.held() // the last widening held without a conflict
			}
			// A widening also waits for a quarter window at this width,
			// whose goodput is what the wider width will be judged by.
			measured := m.win.n >= cmJudgeWindow/4*int(m.width)
			if !m.probing && m.streak >= need<<m.backoff() && m.width < m.max && (measured || m.baseOK) {
				if measured {
					m.base = m.win.rate(now)
				}
				m.from = m.width
				m.setWidth(m.next(), now)
				m.probing = true
			}
		}
	}
	m.grantLocked()
	m.mu.Unlock()
	return pause
}

// undo returns to the width before the last widening, which conflicts
// pushed over the share or the judge rejected: the next widening to this
// width or beyond waits longer.
func (m *ContentionManager) undo(now time.Time) {
	m.fails = min(m.fails+1, cmMaxFails)
	m.failW = m.width
	m.probing = false
	m.narrow(m.from, now)
}

// narrow sets a narrower width and starts a generation: attempts admitted
// before it no longer narrow the gate with a cheap conflict.
func (m *ContentionManager) narrow(w float64, now time.Time) {
	m.setWidth(w, now)
	m.cut = m.epoch
}

// held records that the widening to the current width was kept: widening
// beyond the width that last failed starts afresh.
func (m *ContentionManager) held() {
	m.probing = false
	if m.width >= m.failW {
		m.fails, m.failW = 0, 0
	}
}

// next is the width a widening goes to: twice the width, or half as much
// again if conflicts were tolerated at this width.
func (m *ContentionManager) next() float64 {
	if m.win.conflicts > 0 {
		return min(m.max, math.Ceil(m.width*1.5))
	}
	return min(m.max, m.width*2)
}

// backoff is how many times the streak doubles before the next widening:
// only widenings that would reach a width that was undone back off, so that
// a failed widening from 2 to 3 does not slow the return from 1 to 2.
func (m *ContentionManager) backoff() int {
	if m.failW > 0 && m.next() >= m.failW {
		return m.fails
	}
	return 0
}

// setWidth changes the width and starts a new window and streak.
func (m *ContentionManager) setWidth(w float64, now time.Time) {
	m.width, m.streak, m.baseOK = w, 0, false
	m.win = cmWindow{start: now}
	m.epoch++
}

// judge counts the attempt in the window and, when a widening that tolerated
// conflicts has run for a full window, keeps it only if it commits at least
// cmGain more per second than the narrower width did.
func (m *ContentionManager) judge(conflict bool, now time.Time) {
	if m.win.start.IsZero() {
		m.win.start = now
	}
	m.win.n++
	if conflict {
		m.win.conflicts++
	} else {
		m.win.commit++
	}
	if m.win.n < cmJudgeWindow*int(m.width) {
		return
	}
	if m.probing && m.win.conflicts > 0 {
		if m.win.rate(now) < m.base*(1+cmGain) {
			m.undo(now)
			return
		}
		m.held()
	}
	if !m.probing {
		m.base, m.baseOK = m.win.rate(now), true
	}
	m.win = cmWindow{start: now}
}

func (w cmWindow) rate(now time.Time) float64 {
	el := now.Sub(w.start)
	if el <= 0 || w.n == 0 {
		return 0
	}
	return float64(w.commit) / el.Seconds()
}
