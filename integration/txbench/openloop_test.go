package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Even arrivals come every 1/rate from the start; Poisson ones with
// exponential gaps of mean 1/rate, the same for a seed and stream and
// different for another stream.
func TestArrivals(t *testing.T) {
	even := newArrivals(openLoop{Rate: 200}, 1, 0)
	for k := range 1000 {
		if got, want := even.next(), time.Duration(k)*5*time.Millisecond; got != want {
			t.Fatalf("even arrival %d at %v, want %v", k, got, want)
		}
	}
	const n = 20_000
	a, b, other := newArrivals(openLoop{Rate: 200, Poisson: true}, 1, 0), newArrivals(openLoop{Rate: 200, Poisson: true}, 1, 0),
		newArrivals(openLoop{Rate: 200, Poisson: true}, 1, 8)
	var last time.Duration
	same := 0
	for k := range n {
		x, y, z := a.next(), b.next(), other.next()
		if x != y || x < last {
			t.Fatalf("Poisson arrival %d: %v then %v, again %v", k, last, x, y)
		}
		if x == z {
			same++
		}
		last = x
	}
	// The mean gap is 5 ms; the sum of n exponential gaps has a standard
	// deviation of 5 ms·sqrt(n): within five of them.
	if mean, tol := last.Seconds()/n, 5*0.005/math.Sqrt(n); math.Abs(mean-0.005) > tol {
		t.Errorf("mean Poisson gap %v s, want 0.005 ± %v", mean, tol)
	}
	if same > 0 {
		t.Errorf("%d arrivals of another stream at the same offsets", same)
	}
}

// schedule queues each arrival at its time as the next stream's next call,
// drops the arrivals that find MaxInflight calls queued or running, and stops
// at the end of the run or when told to.
func TestScheduleQueuesAndDrops(t *testing.T) {
	start := time.Unix(1000, 0)
	end := start.Add(time.Second)
	ol := openLoop{Rate: 100, MaxInflight: 3}

	// No server takes a call: 3 queued, the other 97 dropped.
	queue := make(chan arrival, ol.MaxInflight)
	var inflight atomic.Int64
	var slept []time.Time
	dropped := schedule(newArrivals(ol, 1, 5), start, end, 5, 2, &inflight, queue, func(at time.Time) bool {
		slept = append(slept, at)
		return true
	})
	close(queue)
	if dropped != 97 || inflight.Load() != 3 || len(slept) != 100 {
		t.Fatalf("dropped %d, in flight %d, %d waits; want 97, 3, 100", dropped, inflight.Load(), len(slept))
	}
	var got []arrival
	for a := range queue {
		got = append(got, a)
	}
	want := []arrival{{callID(5, 0), start}, {callID(6, 0), start.Add(10 * time.Millisecond)}, {callID(5, 1), start.Add(20 * time.Millisecond)}}
	if !slices.Equal(got, want) {
		t.Errorf("queued %v, want %v", got, want)
	}

	// A server that takes each call at once: nothing dropped, every call
	// of every stream in turn.
	queue = make(chan arrival, ol.MaxInflight)
	inflight.Store(0)
	var ids []int64
	dropped = schedule(newArrivals(ol, 1, 0), start, end, 0, 4, &inflight, queue, func(time.Time) bool {
		select {
		case a := <-queue:
			ids = append(ids, a.id)
			inflight.Add(-1)
		default:
		}
		return true
	})
	ids = append(ids, (<-queue).id)
	if dropped != 0 || len(ids) != 100 {
		t.Fatalf("dropped %d, served %d; want 0, 100", dropped, len(ids))
	}
	for k, id := range ids {
		if id != callID(k%4, k/4) {
			t.Fatalf("call %d has id %#x, want %#x", k, id, callID(k%4, k/4))
		}
	}

	// Stopped after 10 arrivals.
	n := 0
	queue = make(chan arrival, 1000)
	inflight.Store(0)
	schedule(newArrivals(openLoop{Rate: 100, MaxInflight: 1000}, 1, 0), start, end, 0, 1, &inflight, queue, func(time.Time) bool {
		n++
		return n <= 10
	})
	if len(queue) != 10 {
		t.Errorf("%d calls queued after the stop, want 10", len(queue))
	}

	// Each process of a spread gets its share of the rate and of the bound.
	if s := (openLoop{Rate: 300, MaxInflight: 320}).share(8, 32); s.Rate != 75 || s.MaxInflight != 80 {
		t.Errorf("share of 8 workers of 32: %+v", s)
	}
	if s := (openLoop{Rate: 300, MaxInflight: 2}).share(1, 32); s.MaxInflight != 1 {
		t.Errorf("share of 1 worker of 32 of a bound of 2: %+v", s)
	}
}

// instantConn commits every attempt at once, unless the attempt's context
// has ended.
type instantConn struct{ conn }

func (instantConn) attempt(ctx context.Context, _ txBody) (phase, error) {
	return phaseBegin, ctx.Err()
}
func (instantConn) code(error) string    { return "none" }
func (instantConn) retryable(error) bool { return false }

// In the open loop a call is timed, and its deadline runs, from its arrival:
// the time it waited for a worker counts in its latency and in the wait, and
// a call that waited past its deadline fails without committing.
func TestOpenLoopTimesCallsFromArrival(t *testing.T) {
	ws := workloadNamed(t, "hot")
	wl := newWorkloadRun(ws, allDrivers[0], 1, 1)
	w := newWorker(0, instantConn{}, wl, &runner{name: "once", kind: kindLoop, loop: loopPolicy{attempts: 1}}, nil, 1)
	now := time.Now()
	queue := make(chan arrival, 2)
	queue <- arrival{id: callID(0, 0), at: now.Add(-50 * time.Millisecond)}
	queue <- arrival{id: callID(0, 1), at: now.Add(-2 * time.Second)}
	close(queue)
	start := make(chan struct{})
	close(start)
	end := now.Add(time.Hour)
	done := 0
	w.serve(context.Background(), start, &end, time.Second, queue, func() { done++ })
	if done != 2 || w.st.calls != 2 || w.st.commits != 1 || w.st.deadline != 1 {
		t.Fatalf("done %d, %d calls, %d committed, %d past their deadline; want 2, 2, 1, 1", done, w.st.calls, w.st.commits, w.st.deadline)
	}
	if w.st.lat[0] < 50*time.Millisecond || w.st.lat[1] < 2*time.Second || w.st.wait < 2050*time.Millisecond {
		t.Errorf("latencies %v, wait %v: want at least 50ms, 2s and 2.05s", w.st.lat, w.st.wait)
	}
}

// The open-loop flags: -rate, -arrivals, -max-inflight (10 x -workers by
// default), and their bad values.
func TestOpenLoopFlags(t *testing.T) {
	env := func(string) string { return "x" }
	cfg, err := parseFlags([]string{"-rate", "250", "-workers", "8"}, env, &bytes.Buffer{})
	if err != nil || cfg.open != (openLoop{Rate: 250, Poisson: true, MaxInflight: 80}) {
		t.Errorf("-rate 250: %v %+v", err, cfg)
	}
	cfg, err = parseFlags([]string{"-rate", "10", "-arrivals", "uniform", "-max-inflight", "40"}, env, &bytes.Buffer{})
	if err != nil || cfg.open != (openLoop{Rate: 10, MaxInflight: 40}) {
		t.Errorf("-arrivals uniform -max-inflight 40: %v %+v", err, cfg)
	}
	if cfg, err := parseFlags(nil, env, &bytes.Buffer{}); err != nil || cfg.open.Rate != 0 {
		t.Errorf("default: %v %+v, want a closed loop", err, cfg)
	}
	for _, args := range [][]string{{"-rate", "-1"}, {"-rate", "NaN"}, {"-arrivals", "bursty"}, {"-max-inflight", "-3"},
		{"-rate", "10", "-workers", "8", "-max-inflight", "4"}} {
		if _, err := parseFlags(args, env, &bytes.Buffer{}); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// The open loop's table says so and adds drop% and wait ms; the closed
// loop's has neither; the TSV always has the offered rate, the dropped
// calls, drop% and the mean wait.
func TestOpenLoopReport(t *testing.T) {
	r := fakeRun("txretry", 1, 100, nil)
	r.rate = 50
	r.st.dropped = r.st.calls
	r.st.wait = time.Duration(r.st.calls) * 3 * time.Millisecond
	sums := summarize([]runResult{r}, []string{"txretry"}, "txretry")
	for _, tc := range []struct {
		open openLoop
		want bool
	}{{openLoop{}, false}, {openLoop{Rate: 50, Poisson: true, MaxInflight: 320}, true}} {
		var buf bytes.Buffer
		cfg := &config{workers: 32, duration: 10 * time.Second, deadline: time.Second, repeat: 1, open: tc.open}
		if err := writeTable(&buf, cfg, sums, "txretry"); err != nil {
			t.Fatal(err)
		}
		table := buf.String()
		has := strings.Contains(table, "open loop: 50 calls/s (Poisson), at most 320 in flight") &&
			matchLine(table, `runner .* p99\.9 ms +drop% +wait ms +check`) && matchLine(table, `txretry .* 900 +50\.0 +3\.00 +ok 1/1`)
		hasAny := strings.Contains(table, "open loop") || strings.Contains(table, "drop%") || strings.Contains(table, "wait ms")
		if has != tc.want || hasAny != tc.want {
			t.Errorf("rate %v: table\n%s", tc.open.Rate, table)
		}
	}
	rows := tsvRows(sums)
	for col, want := range map[string]string{"offered_tps": "50.0", "dropped": "110", "drop_pct": "50.0", "wait_ms": "3.00"} {
		i := slices.Index(rows[0], col)
		if i < 0 || rows[1][i] != want {
			t.Errorf("TSV column %s: index %d, row %v; want %s", col, i, rows[1], want)
		}
	}
}
