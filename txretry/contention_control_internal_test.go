package txretry

import (
	"fmt"
	"testing"
	"time"
)

// goodput runs s from now until to, and returns its goodput from from on,
// as a multiple of serial.
func (s *replicaSim) goodput(from, to time.Duration) float64 {
	commits := 0
	s.at(from-s.now, func() { commits = s.stats.commits })
	s.run(to)
	return float64(s.stats.commits-commits) / (to - from).Seconds() / float64(time.Second/s.base)
}

// The manager's goodput in a simulated domain (32 callers in one process,
// 1 ms attempts, 1 s deadlines, three seeds), once settled: one hot row
// that slows down as attempts pile up (best run one at a time) at 0.9x
// serial or more; rows that the 32 callers spread over (best run all at
// once) at 3.5x or more; rows enough that nobody conflicts at 25x; and a
// domain whose best changes from one to the other follows it within 300 ms.
// The open domain's spacing does it; no gate closes (the spacing stays
// below half the deadline).
func TestManagerFollowsTheBestGoodput(t *testing.T) {
	cost0 := simCost
	t.Cleanup(func() { simCost = cost0 })
	type phase struct {
		rows int
		cost float64
		minG float64 // goodput, x serial, after settling
	}
	hot := phase{rows: 1, cost: 0.2, minG: 0.9}
	wide := phase{rows: 32, minG: 3.5}
	thin := phase{rows: 100_000, minG: 25}
	const settle, span = 300 * time.Millisecond, 2 * time.Second
	for _, tc := range []struct {
		name   string
		phases []phase
	}{
		{"one hot row", []phase{hot}},
		{"32 rows", []phase{wide}},
		{"rows enough", []phase{thin}},
		{"hot, then 32 rows", []phase{hot, wide}},
		{"32 rows, then hot", []phase{wide, hot}},
	} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed %d", tc.name, seed), func(t *testing.T) {
				s := newReplicaSim(seed, 1, 32)
				for i, p := range tc.phases {
					s.rows, simCost = p.rows, p.cost
					start := time.Duration(i) * span
					g := s.goodput(start+settle, start+span)
					t.Logf("phase %d: goodput %.2fx serial", i, g)
					if g < p.minG {
						t.Errorf("phase %d: goodput %.2fx serial, want %.2f", i, g, p.minG)
					}
				}
			})
		}
	}
}
