package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// The chart of a run's medians is a PNG with a row per workload and driver,
// serial drawn across the spreads; a run at one spread draws too.
func TestWriteChart(t *testing.T) {
	var results []runResult
	for rep := 1; rep <= 3; rep++ {
		for _, procs := range []int{1, 2, 4, 8} {
			for i, name := range []string{"txretry", "cenkalti"} {
				r := mixedRun(name, rep, procs, int64(rep*(i+1)*procs))
				results = append(results, r)
				h := fakeRun(name, rep, int64(100*procs), nil)
				h.procs = procs
				results = append(results, h)
			}
		}
		results = append(results, fakeRun("serial", rep, 500, nil))
	}
	sums := summarize(results, []string{"txretry", "cenkalti", "serial"}, "txretry")
	single := summarize([]runResult{fakeRun("txretry", 1, 1000, nil)}, []string{"txretry"}, "txretry")
	for name, s := range map[string][]summary{"spreads.png": sums, "single.png": single} {
		path := filepath.Join(t.TempDir(), name)
		if err := writeChart(path, s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 1000 {
			t.Errorf("%s: %d bytes, not a PNG: %q", name, len(b), b[:min(len(b), 8)])
		}
	}
	if err := writeChart(filepath.Join(t.TempDir(), "none.png"), nil); err == nil {
		t.Error("a chart of no results did not fail")
	}
	if err := writeChart(filepath.Join(t.TempDir(), "no", "such", "dir.png"), sums); err == nil {
		t.Error("a chart in a missing directory did not fail")
	}
}
