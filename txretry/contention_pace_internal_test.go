package txretry

import (
	"math"
	"testing"
	"time"
)

// paceStep runs one lone attempt of a call that started at since and
// ended at now, and returns the pause release asked for.
func paceStep(t *testing.T, m *ContentionManager, conflict bool, since, now time.Time) time.Duration {
	t.Helper()
	ticket := cmTicket{since: since}
	if !m.tryAcquire(&ticket) {
		t.Fatal("the gate is closed to a lone caller")
	}
	pause := m.release(&ticket, conflict, time.Millisecond, now, true, func() float64 { return 1 })
	if pause > 0 {
		m.giveBack(true)
	}
	return pause
}

// A lone conflict paces the gate: the pause doubles from cmMinPace (or the
// average commit) up to cmMaxPace while such conflicts last, a lone commit
// keeps cmPaceDecay of it, and it shrinks with the call's age until, at
// cmPacePatience, the call retries at once (a pause of 1 ns: in its place,
// without a wait).
func TestContentionPaceDoublesDecaysAndShrinksWithAge(t *testing.T) {
	m, _ := NewContentionManager(0)
	now := time.Unix(1_700_000_000, 0)
	young := now // a call that has just started: the full pace

	want := cmMinPace
	for i := range 12 {
		if got := paceStep(t, m, true, young, now); got != want {
			t.Fatalf("lone conflict %d: pause %v, want %v", i+1, got, want)
		}
		want = min(2*want, cmMaxPace)
	}
	if got := paceStep(t, m, false, young, now); got != 0 {
		t.Fatalf("a lone commit asked for a pause of %v", got)
	}
	if got := paceStep(t, m, true, young, now); got != cmMaxPace {
		t.Fatalf("after one lone commit the pace doubled back to %v, want %v (decayed, then doubled)", got, cmMaxPace)
	}
	// Sixteen lone commits keep 0.9^16 of the pace, as documented
	// (halving would keep 1/65536, less than cmMinPace; 0.8, 1/36), and the
	// next lone conflict doubles that.
	for range 16 {
		paceStep(t, m, false, young, now)
	}
	want = time.Duration(2 * float64(cmMaxPace) * math.Pow(0.9, 16))
	if got := paceStep(t, m, true, young, now); got < want-time.Microsecond || got > want+time.Microsecond {
		t.Fatalf("after sixteen lone commits a lone conflict paused %v, want %v", got, want)
	}
	// Enough lone commits end the pace (100 ms x 0.9^60 is 0.18 ms, under
	// cmMinPace): the next conflict starts again from the floor
	// (cmMinPace, or the average commit if longer).
	const n = 60
	for range n {
		paceStep(t, m, false, young, now)
	}
	m.mu.Lock()
	pace, floor := m.pace, max(m.avg, cmMinPace)
	m.mu.Unlock()
	if pace != 0 {
		t.Fatalf("after %d more lone commits the pace is %v, want none", n, pace)
	}
	if got := paceStep(t, m, true, young, now); got != floor {
		t.Fatalf("the first lone conflict after the pace ended paused %v, want the floor %v", got, floor)
	}
	for range 12 { // back to cmMaxPace for the ages below
		paceStep(t, m, true, young, now)
	}

	for _, tc := range []struct {
		age  time.Duration
		want time.Duration
	}{
		{cmPacePatience / 4, cmMaxPace * 3 / 4},
		{cmPacePatience / 2, cmMaxPace / 2},
		{cmPacePatience, 1},
		{2 * cmPacePatience, 1},
	} {
		got := paceStep(t, m, true, now.Add(-tc.age), now)
		if d := got - tc.want; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("a call %v old paused %v, want %v", tc.age, got, tc.want)
		}
	}

	// An attempt that another attempt of the gate overlapped does not pace.
	m.mu.Lock()
	m.width = 2
	m.mu.Unlock()
	var a, b cmTicket
	if !m.tryAcquire(&a) || !m.tryAcquire(&b) {
		t.Fatal("the gate did not admit two callers")
	}
	if got := m.release(&a, true, time.Millisecond, now, true, nil); got != 0 {
		t.Errorf("a conflict of an attempt that was not alone paused %v", got)
	}
	m.release(&b, false, time.Millisecond, now, true, nil)
}
