package txretry

import (
	"fmt"
	"testing"
	"time"
)

// cmSim drives a manager one sequential attempt at a time, on a simulated
// clock: each attempt lasts d and ends when the next starts.
type cmSim struct {
	t   *testing.T
	m   *ContentionManager
	now time.Time
}

// newCMSim starts with a gate past its slow start, fully open (the tests of
// the slow start use newFreshCMSim).
func newCMSim(t *testing.T, maxWidth int) *cmSim {
	s := newFreshCMSim(t, maxWidth)
	s.m.width, s.m.opened = s.m.max, true
	return s
}

// newFreshCMSim starts with a gate as NewContentionManager makes it.
func newFreshCMSim(t *testing.T, maxWidth int) *cmSim {
	m, err := NewContentionManager(maxWidth)
	if err != nil {
		t.Fatal(err)
	}
	return &cmSim{t: t, m: m, now: time.Unix(1_700_000_000, 0)}
}

func (s *cmSim) run(n int, conflict bool, d time.Duration) {
	s.t.Helper()
	for range n {
		var ticket cmTicket
		if !s.m.tryAcquire(&ticket) {
			s.t.Fatal("the gate is closed to a lone caller")
		}
		s.now = s.now.Add(d)
		if s.m.release(&ticket, conflict, d, s.now, true, nil) > 0 {
			s.m.giveBack(true) // a lone conflict's pause: the next attempt asks again
		}
	}
}

func (s *cmSim) wantWidth(when string, want float64) {
	s.t.Helper()
	if got := s.m.Width(); got != want {
		s.t.Fatalf("%s: width %v, want %v", when, got, want)
	}
}

// A lone conflict in a calm stream restarts the streak but keeps the width;
// conflicts that take more than 1/10 of the attempt time halve it, once per
// conflict while the share stays above.
func TestContentionManagerToleratesRareConflicts(t *testing.T) {
	s := newCMSim(t, 4)
	for range 10 {
		s.run(39, false, time.Millisecond)
		s.run(1, true, time.Millisecond) // one in 40: 2.5% of the time
	}
	s.wantWidth("one conflict in 40 attempts", 4)
	n := 0
	for s.m.Width() == 4 {
		if n++; n > 6 {
			t.Fatal("six conflicts in a row did not narrow the gate")
		}
		s.run(1, true, time.Millisecond)
	}
	s.wantWidth("conflicts in a row", 2)
	s.run(1, true, time.Millisecond)
	s.wantWidth("one more", 1)
}

// The share of time lost to conflicts is averaged over more commits at a
// wide gate (16 x width beyond width 4): there a cluster of conflicts among
// the many attempts in flight does not halve the width at once, while at a
// narrow gate it does, and sustained conflicts narrow both.
func TestContentionManagerAveragesOverMoreCommitsWhenWide(t *testing.T) {
	for _, tc := range []struct {
		width       int
		clusterKeep bool // the width survives a cluster of 8 conflicts
	}{
		{4, false},
		{32, true},
	} {
		t.Run(fmt.Sprintf("width %d", tc.width), func(t *testing.T) {
			s := newCMSim(t, tc.width)
			s.run(2000, false, time.Millisecond)
			s.run(8, true, time.Millisecond)
			if kept := s.m.Width() == float64(tc.width); kept != tc.clusterKeep {
				t.Fatalf("after a cluster of 8 conflicts the width is %v: kept %v, want %v", s.m.Width(), kept, tc.clusterKeep)
			}
			for n := 0; s.m.Width() == float64(tc.width); n++ {
				if n == 200 {
					t.Fatal("200 conflicts in a row did not narrow the gate")
				}
				s.run(1, true, time.Millisecond)
			}
		})
	}
}

// A conflict that lasted a second, against 1 ms commits, is most of the
// recent attempt time: it halves the width at once.
func TestContentionManagerHalvesOnAnExpensiveConflict(t *testing.T) {
	s := newCMSim(t, 8)
	s.run(100, false, time.Millisecond)
	s.run(1, true, time.Second)
	s.wantWidth("after a 1 s deadlock", 4)
}

// Each widening in a row that a conflict undid doubles the streak the next
// one needs: probing a hot row costs ever less.
func TestContentionManagerBacksOffFailedWidenings(t *testing.T) {
	s := newCMSim(t, 2)
	s.run(1, false, time.Millisecond) // sets the average commit
	for fails := range 4 {
		for i := 0; s.m.Width() != 1; i++ {
			if i == 100 {
				t.Fatal("conflicts in a row never halved the width")
			}
			s.run(1, true, time.Millisecond)
		}
		s.m.mu.Lock()
		need := max(s.m.debt+cmStreak<<fails, cmJudgeWindow/4-s.m.win.n)
		s.m.mu.Unlock()
		s.run(need-1, false, time.Millisecond)
		s.wantWidth("one commit short of the streak", 1)
		s.run(1, false, time.Millisecond)
		s.wantWidth("after the streak", 2)
	}
}

// A widening during which conflicts were tolerated stays only if it
// commits at least 5% more per second than the width before it.
func TestContentionManagerJudgesToleratedWidenings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		perMilli int // commits per millisecond at width 2 (1 at width 1)
		want     float64
	}{
		{"no gain", 1, 1},
		{"twice the goodput", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCMSim(t, 2)
			for s.m.Width() == 2 {
				s.run(1, true, time.Millisecond) // a burst of conflicts
			}
			// A calm stretch at width 1, 1000 commits a second: the share
			// of conflicts decays, a window measures the goodput, and the
			// streak widens the gate.
			for s.m.Width() == 1 {
				s.run(1, false, time.Millisecond)
			}
			// At width 2: a tolerated conflict now and then, goodput as
			// given, for a whole window.
			for i := 1; i <= cmJudgeWindow*2; i++ {
				d := time.Millisecond / time.Duration(tc.perMilli)
				s.run(1, i%20 == 0, d)
			}
			s.wantWidth("after a judged window", tc.want)
		})
	}
}

// untilWidthChanges runs calm attempts (a tolerated conflict every
// conflictEvery-th when positive) until the width changes, and returns how
// many it took.
func (s *cmSim) untilWidthChanges(conflictEvery int) int {
	s.t.Helper()
	w := s.m.Width()
	for i := 1; ; i++ {
		if i > 1_000_000 {
			s.t.Fatalf("width stuck at %v", w)
		}
		s.run(1, conflictEvery > 0 && i%conflictEvery == 0, time.Millisecond)
		if s.m.Width() != w {
			return i
		}
	}
}

// After conflicts were tolerated at a width, a widening adds half of it
// (rounded up) instead of doubling the overlap; a widening from a
// conflict-free width doubles.
func TestContentionManagerWidensByHalfAfterToleratedConflicts(t *testing.T) {
	s := newCMSim(t, 8)
	for s.m.Width() > 2 {
		s.run(1, true, time.Millisecond)
	}
	s.untilWidthChanges(0)
	s.wantWidth("a conflict-free widening", 4)
	for s.m.Width() > 2 {
		s.run(1, true, time.Millisecond)
	}
	// At width 2 a conflict every 40 attempts (2.5%) is tolerated, but the
	// streak of 32 conflict-free attempts still comes.
	s.untilWidthChanges(40)
	s.wantWidth("a widening after tolerated conflicts", 3)
	// Conflicts at 3 undo the widening: back to 2, not half of 3.
	for s.m.Width() == 3 {
		s.run(1, true, time.Millisecond)
	}
	s.wantWidth("an undone widening", 2)
}

// A widening that was undone makes only widenings that reach that width
// again wait longer: the gate returns from 1 to 2 as fast as ever after a
// failed widening from 2 to 3.
func TestContentionManagerBacksOffOnlyAtTheWidthThatFailed(t *testing.T) {
	s := newCMSim(t, 4)
	for s.m.Width() > 2 {
		s.run(1, true, time.Millisecond)
	}
	// Twice widened to 3 after tolerated conflicts, then, with the same
	// goodput at 3 as at 2 (1 ms per commit, a tolerated conflict every
	// 40th), judged no better after a window and undone, back to 2.
	undone := func() {
		t.Helper()
		s.wantWidth("a widening after tolerated conflicts", 3)
		s.untilWidthChanges(40)
		s.wantWidth("an undone widening", 2)
	}
	s.untilWidthChanges(40)
	undone()
	// The second widening needs a streak twice as long: one tolerated
	// conflict, then a long calm.
	s.run(10, false, time.Millisecond)
	s.run(1, true, time.Millisecond)
	s.untilWidthChanges(0)
	undone()
	for s.m.Width() > 1 {
		s.run(1, true, time.Millisecond)
	}
	back := s.untilWidthChanges(0)
	s.wantWidth("back from 1", 2)
	if limit := cmStreak + cmJudgeWindow/4; back > limit {
		t.Errorf("back from 1 to 2 took %d attempts, more than %d: the failures at 3 slowed it", back, limit)
	}
	again := s.untilWidthChanges(0)
	s.wantWidth("widening again from 2", 4)
	if min := 2 * cmStreak << 2; again < min {
		t.Errorf("widening again past 3 took %d attempts, fewer than %d: no backoff", again, min)
	}
}

// A cheap conflict narrows the gate at most once per generation of
// attempts: those admitted before the width last narrowed do not narrow it
// again (TCP halves its window at most once per round trip for the same
// reason). Expensive ones, such as deadlocks found after a second, do.
func TestContentionManagerNarrowsOncePerGeneration(t *testing.T) {
	for _, tc := range []struct {
		name      string
		d         time.Duration // of each conflict, against 1 ms commits
		afterGen  float64       // width after eight conflicts of one generation
		afterNext float64       // and after one of the next generation
	}{
		{"cheap conflicts", 2 * time.Millisecond, 4, 2},
		{"deadlocks", time.Second, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCMSim(t, 8)
			s.run(10, false, time.Millisecond) // sets the average commit
			var inFlight [8]cmTicket
			for i := range inFlight {
				if !s.m.tryAcquire(&inFlight[i]) {
					t.Fatalf("attempt %d not admitted at width 8", i)
				}
			}
			for i := range inFlight {
				s.now = s.now.Add(tc.d)
				s.m.release(&inFlight[i], true, tc.d, s.now, true, nil)
			}
			s.wantWidth("after eight conflicts of one generation", tc.afterGen)
			s.run(1, true, tc.d) // admitted after the narrowing
			s.wantWidth("after a conflict of the next generation", tc.afterNext)
		})
	}
}

// An attempt admitted before a widening still undoes it if it conflicts:
// only narrowings start a new generation.
func TestContentionManagerWideningKeepsTheGeneration(t *testing.T) {
	s := newCMSim(t, 4)
	for s.m.Width() > 2 {
		s.run(1, true, time.Millisecond)
	}
	var a cmTicket
	if !s.m.tryAcquire(&a) {
		t.Fatal("not admitted at width 2")
	}
	s.untilWidthChanges(0) // the other slot's attempts widen the gate
	s.wantWidth("widened while a was running", 4)
	s.now = s.now.Add(time.Second)
	if s.m.release(&a, true, time.Second, s.now, true, nil) > 0 {
		t.Fatal("a's conflict overlapped other attempts, but it was paused as a lone one")
	}
	s.wantWidth("after a's expensive conflict", 2)
}

// A fresh gate opens from 1, doubling after each generation of attempts
// without a conflict (1 + 2 + 4 + 8 attempts to reach 16), and is then fully
// open: a calm workload pays a few dozen narrower attempts once.
func TestContentionManagerSlowStart(t *testing.T) {
	s := newFreshCMSim(t, 16)
	s.wantWidth("fresh", 1)
	for _, want := range []float64{2, 4, 8, 16} {
		s.run(int(s.m.Width()), false, time.Millisecond)
		s.wantWidth("after a generation without a conflict", want)
	}
	// Past the slow start, a lone conflict is tolerated as usual.
	s.run(100, false, time.Millisecond)
	s.run(1, true, time.Millisecond)
	s.wantWidth("a lone conflict after the slow start", 16)
}

// The first conflict of the slow start returns to the width before the last
// doubling and ends the slow start, even a conflict that the share would
// tolerate later: widening then waits for a streak as usual.
func TestContentionManagerSlowStartEndsAtTheFirstConflict(t *testing.T) {
	s := newFreshCMSim(t, 16)
	s.run(1, false, time.Millisecond)
	s.run(2, false, time.Millisecond)
	s.wantWidth("two generations", 4)
	s.run(1, true, time.Millisecond)
	s.wantWidth("first conflict", 2)
	s.run(2*cmStreak-1, false, time.Millisecond)
	s.wantWidth("a streak short of 16 x width", 2)
}
