package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestRun runs go test on a sample module with a passing, a skipped and
// (with SAMPLE_FAIL) a failing test, and checks the totals, the skip
// reason and the exit status, with CI set and not.
func TestRun(t *testing.T) {
	tests := []struct {
		name     string
		fail, ci bool
		want     int
		wantLast []string
	}{
		{"skip outside CI", false, false, 0, []string{
			"4 passed, 0 failed, 1 skipped",
			"  skipped example.com/sample TestSkip: sample_test.go:10: no server: set SAMPLE_DSN"}},
		{"skip under CI", false, true, 1, []string{
			"4 passed, 0 failed, 1 skipped",
			"  skipped example.com/sample TestSkip: sample_test.go:10: no server: set SAMPLE_DSN",
			"FAIL: CI is true and 1 tests were skipped: under CI every test must run"}},
		{"failure", true, false, 1, []string{
			"2 passed, 2 failed, 1 skipped",
			"  skipped example.com/sample TestSkip: sample_test.go:10: no server: set SAMPLE_DSN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fail := ""
			if tt.fail {
				fail = "1"
			}
			t.Setenv("SAMPLE_FAIL", fail)
			// Separate buffers: go test's stderr is copied by a goroutine
			// of its own.
			var out, stderr bytes.Buffer
			got := run([]string{"-C testdata/sample -count=1 ./..."}, &out, &stderr, tt.ci)
			lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
			if got != tt.want || len(lines) < len(tt.wantLast) ||
				strings.Join(lines[len(lines)-len(tt.wantLast):], "\n") != strings.Join(tt.wantLast, "\n") {
				t.Errorf("run = %d, want %d; output ends\n%s\nwant it to end\n%s", got, tt.want, out.String(), strings.Join(tt.wantLast, "\n"))
			}
			if tt.fail && !strings.Contains(out.String(), "failed on purpose") {
				t.Errorf("output does not show the failure:\n%s", out.String())
			}
		})
	}
}

// TestBuildFailure checks that a package that does not build counts as a
// failure and shows the compiler's message.
func TestBuildFailure(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/go.mod", "module example.com/broken\n\ngo 1.25\n")
	writeFile(t, dir+"/x_test.go", "package broken\n\nfunc TestX(t *testing.T) { undefined() }\n")
	var out, stderr bytes.Buffer
	if got := run([]string{"-C " + dir + " ./..."}, &out, &stderr, false); got != 1 {
		t.Errorf("run = %d, want 1", got)
	}
	if !strings.Contains(out.String(), "0 passed, 1 failed, 0 skipped") || !strings.Contains(out.String(), "undefined") {
		t.Errorf("output:\n%s", out.String())
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestNotSelected runs two commands at once (-j 2), one with a -skip
// pattern, and checks that the test left out counts nowhere in the totals
// and is named, with the -omit text, under "not selected".
func TestNotSelected(t *testing.T) {
	var out, stderr bytes.Buffer
	got := run([]string{"-j", "2", "-omit", "example.com/other: needs a cluster", "-all", "make test-all",
		"-C testdata/sample -count=1 -skip ^TestSkip$ ./...",
		"-C testdata/sample -count=1 -run ^TestPass$ ./..."}, &out, &stderr, true)
	wantLast := []string{
		"5 passed, 0 failed, 0 skipped",
		"not selected (not counted above, run by make test-all):",
		"  example.com/other: needs a cluster",
		"  tests matching -skip ^TestSkip$ in testdata/sample",
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if got != 0 || len(lines) < len(wantLast) ||
		strings.Join(lines[len(lines)-len(wantLast):], "\n") != strings.Join(wantLast, "\n") {
		t.Errorf("run = %d, want 0; output ends\n%s\nwant it to end\n%s", got, out.String(), strings.Join(wantLast, "\n"))
	}
	if n := strings.Count(out.String(), "== done in "); n != 2 {
		t.Errorf("%d commands reported done, want 2:\n%s", n, out.String())
	}
}

// TestUsage checks that bad arguments are an error, not a panic.
func TestUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"-j", "0", "./..."}, {"-j", "x"}} {
		var out, stderr bytes.Buffer
		if got := run(args, &out, &stderr, false); got != 2 {
			t.Errorf("run(%q) = %d, want 2", args, got)
		}
	}
}
