package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"slices"
	"testing"
	"time"
)

func TestShareSplitsWorkersEvenly(t *testing.T) {
	for _, tc := range []struct{ n, procs int }{{32, 8}, {32, 1}, {10, 4}, {4, 4}, {5, 2}} {
		next := 0
		for i := range tc.procs {
			first, workers := share(tc.n, tc.procs, i)
			if first != next {
				t.Errorf("share(%d, %d, %d): first %d, want %d", tc.n, tc.procs, i, first, next)
			}
			if lo := tc.n / tc.procs; workers != lo && workers != lo+1 {
				t.Errorf("share(%d, %d, %d): %d workers, want %d or %d", tc.n, tc.procs, i, workers, lo, lo+1)
			}
			next += workers
		}
		if next != tc.n {
			t.Errorf("share(%d, %d): %d workers in all", tc.n, tc.procs, next)
		}
	}
	if _, w := share(32, 8, 3); w != 4 {
		t.Errorf("32 over 8: %d each, want 4", w)
	}
}

// The children's reports survive JSON and merge into one result: counts
// summed, and percentiles over all the calls, not the worst child's.
func TestMergeChildReports(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	a := stats{lat: ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), calls: 10, inDeadline: 8, exhausted: 1, uncertain: 1,
		attempts: 15, commits: 8, window: time.Second, codes: map[string]int64{"40001": 5},
		committedIDs: []int64{1, 2}, uncertainIDs: []int64{3}}
	b := stats{lat: ms(1000, 1000), calls: 2, inDeadline: 1, deadline: 1, late: 0, cut: 1,
		attempts: 4, commits: 1, window: time.Second, codes: map[string]int64{"40001": 2, "none": 1},
		committedIDs: []int64{1 << seqBits}, otherSample: "boom"}
	var parts []stats
	for _, s := range []stats{a, b} {
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(reportOf(&s)); err != nil {
			t.Fatal(err)
		}
		var rep childReport
		if err := json.NewDecoder(&buf).Decode(&rep); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, rep.stats())
	}
	st := mergeStats(parts)
	if st.calls != 12 || st.inDeadline != 9 || st.exhausted != 1 || st.deadline != 1 || st.uncertain != 1 || st.cut != 1 ||
		st.attempts != 19 || st.commits != 9 || st.window != 2*time.Second || st.otherSample != "boom" {
		t.Errorf("merged counts: %+v", st)
	}
	if st.codes["40001"] != 7 || st.codes["none"] != 1 {
		t.Errorf("merged codes: %v", st.codes)
	}
	if !slices.Equal(st.committedIDs, []int64{1, 2, 1 << seqBits}) || !slices.Equal(st.uncertainIDs, []int64{3}) {
		t.Errorf("merged ids: %v %v", st.committedIDs, st.uncertainIDs)
	}
	// 12 calls: p50 is the 6th (6 ms), p99 the 12th (1 s); the median of
	// the children's p50s would be 5.5 ms or 1 s.
	p50, p99, p999 := percentiles(st.lat)
	if p50 != 6*time.Millisecond || p99 != time.Second || p999 != time.Second {
		t.Errorf("percentiles %v %v %v", p50, p99, p999)
	}
	r := runResult{duration: 10 * time.Second, workers: 4, st: st}
	if g := r.goodput(); math.Abs(g-0.9) > 1e-9 {
		t.Errorf("goodput %v, want 0.9", g)
	}
}

// Each spread of a runner is compared with the reference runner at the same
// spread and with serial's only run of the repeat.
func TestSummarizeSpreads(t *testing.T) {
	run := func(runner string, procs int, committed int64) runResult {
		r := fakeRun(runner, 1, committed, nil)
		r.procs = procs
		return r
	}
	results := []runResult{
		run("txretry", 1, 1000), run("jitter", 4, 300), run("serial", 1, 500),
		run("txretry", 4, 2000), run("jitter", 1, 400),
	}
	sums := summarize(results, []string{"txretry", "jitter", "serial"}, "txretry")
	type row struct {
		runner        string
		procs         int
		ratio, serial float64
	}
	want := []row{{"txretry", 1, 1, 2}, {"txretry", 4, 1, 4}, {"jitter", 1, 0.4, 0.8}, {"jitter", 4, 0.15, 0.6}, {"serial", 1, 0.5, 1}}
	if len(sums) != len(want) {
		t.Fatalf("%d summaries, want %d", len(sums), len(want))
	}
	for i, w := range want {
		s := &sums[i]
		ratio := goodputRatio(s.runs[0], s.refs[0].ref)
		vs := goodputRatio(s.runs[0], s.refs[0].serial)
		if s.runner != w.runner || s.procs != w.procs || math.Abs(ratio-w.ratio) > 1e-9 || math.Abs(vs-w.serial) > 1e-9 {
			t.Errorf("summary %d: %s procs %d ratio %v x serial %v, want %+v", i, s.runner, s.procs, ratio, vs, w)
		}
	}
}

func TestCombosAndProcsFlag(t *testing.T) {
	getenv := func(string) string { return "postgres://x" }
	cfg, err := parseFlags([]string{"-driver", "pgx", "-runners", "txretry,serial,once", "-procs", "1, 4,4,8"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.procs, []int{1, 4, 8}) {
		t.Fatalf("procs %v", cfg.procs)
	}
	var got []string
	for _, c := range combos(cfg) {
		got = append(got, c.r.name+"/"+string(rune('0'+c.procs)))
	}
	if want := []string{"txretry/1", "txretry/4", "txretry/8", "serial/1", "once/1", "once/4", "once/8"}; !slices.Equal(got, want) {
		t.Errorf("combos %v, want %v", got, want)
	}
	if cfg, _ := parseFlags([]string{"-driver", "pgx"}, getenv, io.Discard); !slices.Equal(cfg.procs, []int{1}) {
		t.Errorf("default procs %v", cfg.procs)
	}
	for _, bad := range []string{"0", "x", "", "33"} {
		if _, err := parseFlags([]string{"-driver", "pgx", "-procs", bad}, getenv, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("-procs %q: %v, want errUsage", bad, err)
		}
	}
}
