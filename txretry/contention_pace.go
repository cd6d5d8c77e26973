package txretry

// The pace: conflicts that came from other processes. See contention.md.

import (
	"time"
)

// paceLocked learns from an attempt that no other attempt of this gate
// overlapped (it entered an empty gate, and none entered after it): a
// conflict there came from outside, typically from another process of the
// same service, whose own gate this one cannot see. Such a conflict doubles
// the pace (from cmMinPace, or the average commit if longer, up to
// cmMaxPace) and returns a pause of up to the pace, jittered, during which
// the caller keeps its place: the whole process steps back from the
// contended data for a while, as a backoff would, while its callers stay
// in arrival order. A lone commit multiplies the pace by cmPaceDecay, to
// none below cmMinPace.
//
// The pause shrinks with the call's age and is gone once the call is
// cmPacePatience old: pacing alone lets the process that commits keep
// committing, since its next attempt starts while the others pause, and
// their calls would run into the deadline (the capture effect of Ethernet's
// backoff). An old call retries at once instead and takes its chance
// against the process that has the data. See contention.md.
func (m *ContentionManager) paceLocked(t *cmTicket, conflict bool, now time.Time, rnd func() float64) time.Duration {
	if !t.alone || t.admit != m.admits {
		return 0
	}
	if !conflict {
		if m.pace = time.Duration(float64(m.pace) * cmPaceDecay); m.pace < cmMinPace {
			m.pace = 0
		}
		return 0
	}
	m.pace = min(max(2*m.pace, m.avg, cmMinPace), cmMaxPace)
	p := float64(m.pace)
	if rnd != nil {
		p *= rnd()
	}
	if !t.since.IsZero() {
		p *= max(0, 1-float64(now.Sub(t.since))/float64(cmPacePatience))
	}
	return max(time.Duration(p), 1) // 1: at once, in its place
}
