package txretry_test

import (
	"math"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

func TestBackoffs(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		b     txretry.Backoff
		retry int
		rnd   float64
		want  time.Duration
	}{
		{"constant", txretry.Constant(7 * ms), 5, 0.9, 7 * ms},
		{"exponential 1", txretry.Exponential(2 * ms), 1, 0.9, 2 * ms},
		{"exponential 4", txretry.Exponential(2 * ms), 4, 0.9, 16 * ms},
		{"exponential retry 0 counts as 1", txretry.Exponential(2 * ms), 0, 0, 2 * ms},
		{"exponential saturates", txretry.Exponential(time.Second), 80, 0, time.Duration(math.MaxInt64)},
		{"exponential near overflow", txretry.Exponential(time.Hour), 40, 0, time.Duration(math.MaxInt64)},
		{"capped", txretry.Capped(10*ms, txretry.Exponential(2*ms)), 5, 0, 10 * ms},
		{"full jitter", txretry.FullJitter(txretry.Constant(100 * ms)), 1, 0.25, 25 * ms},
		{"full jitter zero", txretry.FullJitter(txretry.Constant(100 * ms)), 1, 0, 0},
		{"default retry 1", txretry.DefaultBackoff(), 1, 0.5, 1 * ms},
		{"default capped", txretry.DefaultBackoff(), 30, 0.5, txretry.DefaultBackoffCap / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Delay(tc.retry, tc.rnd); got != tc.want {
				t.Fatalf("Delay(%d, %v) = %v, want %v", tc.retry, tc.rnd, got, tc.want)
			}
		})
	}
}
