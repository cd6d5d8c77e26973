// Command testsum runs go test over several modules and ends with one line
// of totals over all of them, "N passed, N failed, N skipped", followed by
// every skipped test with its reason, so that a skip is never silent. With
// CI set to a true value, any skipped test fails the run.
//
// Each argument is one go test command line, without "go test", split at
// spaces; testsum adds -json and reads the events:
//
//	testsum "-C .. -race -count=1 ./..." "-C ../examples -count=1 ./..."
//
// It prints one line per package (ok, FAIL, or no test files), the output
// of each failed test, and the totals. It exits with 1 when a test or a
// build failed, a go test command failed without saying why, or, under CI,
// a test was skipped. It is a development tool of txretry, not a public
// API. Why not gotestsum: it would be one more module to download, and its
// summary covers one go test command, where make test runs one per module.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, ciEnabled()))
}

// ciEnabled reports whether CI holds a true value.
func ciEnabled() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	Elapsed     float64
	ImportPath  string
	FailedBuild string
}

// result is a finished test with its output.
type result struct {
	pkg, test string
	output    []string
}

// summary gathers the results of every go test command.
type summary struct {
	w                       io.Writer
	passed, failed, skipped []result
	// output is each running test's output, by package and test.
	output map[string][]string
	// pkgFailed counts packages that failed outside any test (a build
	// error, TestMain, a panic, a leak check).
	pkgFailed []result
	// testFailedIn records packages with a failed test.
	testFailedIn map[string]bool
}

func run(args []string, stdout, stderr io.Writer, ci bool) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, `usage: testsum "go test arguments" ...`)
		return 2
	}
	s := &summary{w: stdout, output: map[string][]string{}, testFailedIn: map[string]bool{}}
	start := time.Now()
	cmdFailed := false
	for _, a := range args {
		fields := strings.Fields(a)
		// -C must come first.
		var cmdArgs []string
		if len(fields) >= 2 && fields[0] == "-C" {
			cmdArgs = append(cmdArgs, "test", "-C", fields[1], "-json")
			fields = fields[2:]
		} else {
			cmdArgs = append(cmdArgs, "test", "-json")
		}
		cmdArgs = append(cmdArgs, fields...)
		fmt.Fprintf(stdout, "== go %s\n", strings.Join(cmdArgs, " "))
		failedBefore := len(s.failed) + len(s.pkgFailed)
		cmd := exec.Command(goCommand(), cmdArgs...)
		cmd.Stderr = stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		s.read(out)
		if err := cmd.Wait(); err != nil && len(s.failed)+len(s.pkgFailed) == failedBefore {
			fmt.Fprintf(stdout, "FAIL: go %s: %v\n", strings.Join(cmdArgs, " "), err)
			cmdFailed = true
		}
	}
	return s.report(time.Since(start), ci, cmdFailed)
}

// goCommand returns the go command to run: $GO, else go.
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// read consumes one go test -json stream.
func (s *summary) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(s.w, "%s\n", line)
			continue
		}
		s.handle(e)
	}
}

// handle records one event.
func (s *summary) handle(e event) {
	key := e.Package + "\x00" + e.Test
	switch e.Action {
	case "output":
		s.output[key] = append(s.output[key], e.Output)
	case "build-output":
		s.output[e.ImportPath+"\x00"] = append(s.output[e.ImportPath+"\x00"], e.Output)
	case "pass", "fail", "skip":
		r := result{pkg: e.Package, test: e.Test, output: s.output[key]}
		delete(s.output, key)
		if e.Test == "" {
			s.packageDone(e, r)
			return
		}
		switch e.Action {
		case "pass":
			s.passed = append(s.passed, r)
		case "fail":
			s.failed = append(s.failed, r)
			s.testFailedIn[e.Package] = true
			fmt.Fprintf(s.w, "--- FAIL: %s %s\n%s", e.Package, e.Test, indent(r.output))
		case "skip":
			s.skipped = append(s.skipped, r)
		}
	}
}

// packageDone prints a package's line.
func (s *summary) packageDone(e event, r result) {
	switch {
	case e.Action == "pass":
		fmt.Fprintf(s.w, "ok   %s %.2fs\n", e.Package, e.Elapsed)
	case e.Action == "skip":
		fmt.Fprintf(s.w, "?    %s [no test files]\n", e.Package)
	default:
		if e.FailedBuild != "" {
			r.output = append(s.output[e.FailedBuild+"\x00"], r.output...)
		}
		fmt.Fprintf(s.w, "FAIL %s %.2fs\n", e.Package, e.Elapsed)
		if !s.testFailedIn[e.Package] {
			// Nothing failed inside a test: the package failed as a
			// whole; show why.
			r.test = "(package)"
			s.pkgFailed = append(s.pkgFailed, r)
			fmt.Fprint(s.w, indent(r.output))
		}
	}
}

// report prints the totals and the skipped tests, and returns the exit
// status.
func (s *summary) report(d time.Duration, ci, cmdFailed bool) int {
	failed := len(s.failed) + len(s.pkgFailed)
	fmt.Fprintf(s.w, "\n== totals (%s)\n", d.Round(time.Second))
	for _, r := range append(s.pkgFailed, s.failed...) {
		fmt.Fprintf(s.w, "  failed %s %s\n", r.pkg, r.test)
	}
	fmt.Fprintf(s.w, "%d passed, %d failed, %d skipped\n", len(s.passed), failed, len(s.skipped))
	for _, r := range s.skipped {
		fmt.Fprintf(s.w, "  skipped %s %s: %s\n", r.pkg, r.test, skipReason(r.output))
	}
	switch {
	case failed > 0 || cmdFailed:
		return 1
	case ci && len(s.skipped) > 0:
		fmt.Fprintf(s.w, "FAIL: CI is true and %d tests were skipped: under CI every test must run\n", len(s.skipped))
		return 1
	}
	return 0
}

// skipReason returns the message of a skipped test from its output: the
// lines other than go test's own === and --- lines, on one line.
func skipReason(output []string) string {
	var parts []string
	for _, l := range output {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}

// indent returns output with each line indented.
func indent(output []string) string {
	var b strings.Builder
	for _, l := range output {
		b.WriteString("    " + l)
		if !strings.HasSuffix(l, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
