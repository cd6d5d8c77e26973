package txretry

import (
	"fmt"
	"testing"
	"time"
)

// widths runs s from now until to, and returns the width of its first
// replica's gate every millisecond from from on (an open gate counts as
// the manager's maximum width), and the goodput over that span as a
// multiple of serial.
func (s *replicaSim) widths(from, to time.Duration) ([]int, float64) {
	var out []int
	commits := 0
	var sample func()
	sample = func() {
		if s.now == from {
			commits = s.stats.commits
		}
		w := s.replicas[0].d.width
		if w == 0 {
			w = DefaultContentionWidth
		}
		out = append(out, w)
		s.at(time.Millisecond, sample)
	}
	s.at(from-s.now, sample)
	s.run(to)
	return out, float64(s.stats.commits-commits) / (to - from).Seconds() / float64(time.Second/s.base)
}

// within reports whether at least 9 in 10 of widths are in [lo, hi].
func within(widths []int, lo, hi int) bool {
	in := 0
	for _, w := range widths {
		if w >= lo && w <= hi {
			in++
		}
	}
	return in*10 >= len(widths)*9
}

// The controller's width converges near the width where the simulated
// domain's goodput peaks, from whatever width it closed at, within a bounded
// time (a simulated attempt lasts 1 ms; a window is 18 to 144 ends): one
// hot row that slows down as attempts pile up peaks at 1; rows that 32
// callers spread over peak at all 32; and a domain whose best width changes
// follows it. 32 callers in one process, 1 s deadlines; three seeds.
func TestControllerFindsTheBestWidth(t *testing.T) {
	cost0 := simCost
	t.Cleanup(func() { simCost = cost0 })
	type phase struct {
		rows   int
		cost   float64
		lo, hi int     // the widths near the peak
		minG   float64 // goodput, x serial, after settling
	}
	hot := phase{rows: 1, cost: 0.2, lo: 1, hi: 2, minG: 0.9}
	wide := phase{rows: 32, lo: 16, hi: DefaultContentionWidth, minG: 8}
	thin := phase{rows: 100_000, lo: DefaultContentionWidth, hi: DefaultContentionWidth, minG: 25}
	const settle, span = 300 * time.Millisecond, 2 * time.Second
	for _, tc := range []struct {
		name   string
		phases []phase
	}{
		{"one hot row: 1", []phase{hot}},
		{"32 rows: all", []phase{wide}},
		{"rows enough: open", []phase{thin}},
		{"hot, then 32 rows", []phase{hot, wide}},
		{"32 rows, then hot", []phase{wide, hot}},
	} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed %d", tc.name, seed), func(t *testing.T) {
				s := newReplicaSim(seed, 1, 32)
				for i, p := range tc.phases {
					s.rows, simCost = p.rows, p.cost
					start := time.Duration(i) * span
					ws, g := s.widths(start+settle, start+span)
					t.Logf("phase %d: goodput %.2fx serial, widths %v ...", i, g, ws[:20])
					if !within(ws, p.lo, p.hi) || g < p.minG {
						t.Errorf("phase %d: goodput %.2fx serial (want %.2f), widths %v, want 9 in 10 in [%d, %d]", i, g, p.minG, ws, p.lo, p.hi)
					}
				}
			})
		}
	}
}
