// Command testsum runs go test over several modules and ends with one line
// of totals over all of them, "N passed, N failed, N skipped", followed by
// every skipped test with its reason, so that a skip is never silent, and
// by what the run left out on purpose. With CI set to a true value, any
// skipped test fails the run.
//
// Each argument is one go test command line, without "go test", split at
// spaces; testsum adds -json and reads the events:
//
//	testsum [-j n] [-omit text]... [-all target] "-C .. -race -count=1 ./..." "-C ../examples -count=1 ./..."
//
// It runs up to n commands at once (-j, default 1), started in the order
// given. It prints one line per package (ok, FAIL, or no test files) with
// its time, each command's time when it ends, the output of each failed
// test, and the totals. Tests left out of the run are never counted as
// skipped: after the totals, testsum names them under "not selected", each
// -skip pattern of a command and each -omit text (a package the commands
// leave out, say), with the target that runs them (-all).
//
// It exits with 1 when a test or a build failed, a go test command failed
// without saying why, or, under CI, a test was skipped. It is a development
// tool of txretry, not a public API. Why not gotestsum: it would be one
// more module to download, and its summary covers one go test command,
// where make test runs one per module.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// summary gathers the results of every go test command. Its methods are
// called under mu: the commands run concurrently.
type summary struct {
	mu                      sync.Mutex
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

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func run(args []string, stdout, stderr io.Writer, ci bool) int {
	fs := flag.NewFlagSet("testsum", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jobs := fs.Int("j", 1, "run up to `n` go test commands at once")
	all := fs.String("all", "", "the `target` that runs what this run leaves out, named in the closing lines")
	var omitted multiFlag
	fs.Var(&omitted, "omit", "name `text` (say, a package left out) under \"not selected\" in the closing lines; repeatable")
	// The go test commands start with "-" too ("-C .. ./..."): the flags
	// of testsum are the leading arguments that name one of them.
	n := 0
	for n < len(args) {
		name, _, hasValue := strings.Cut(strings.TrimPrefix(args[n], "-"), "=")
		if !strings.HasPrefix(args[n], "-") || fs.Lookup(name) == nil {
			break
		}
		n++
		if !hasValue {
			n++
		}
	}
	if err := fs.Parse(args[:min(n, len(args))]); err != nil {
		return 2
	}
	cmds := args[min(n, len(args)):]
	if len(cmds) == 0 || *jobs < 1 {
		fmt.Fprintln(stderr, `usage: testsum [-j n] [-omit text]... [-all target] "go test arguments" ...`)
		return 2
	}
	s := &summary{w: stdout, output: map[string][]string{}, testFailedIn: map[string]bool{}}
	// The commands' standard errors are copied by goroutines of their own.
	stderr = &lockedWriter{w: stderr}
	start := time.Now()
	var (
		wg        sync.WaitGroup
		cmdFailed atomic.Bool
		slots     = make(chan struct{}, *jobs)
	)
	for _, a := range cmds {
		cmdArgs := goTestArgs(a)
		skip, _ := flagValue(cmdArgs, "-skip")
		if skip != "" {
			dir, _ := flagValue(cmdArgs, "-C")
			omitted = append(omitted, fmt.Sprintf("tests matching -skip %s in %s", skip, dir))
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if !s.runCommand(cmdArgs, stderr) {
				cmdFailed.Store(true)
			}
		}()
	}
	wg.Wait()
	return s.report(time.Since(start), ci, cmdFailed.Load(), omitted, *all)
}

// goTestArgs returns the go command's arguments for one argument of
// testsum: test, -C and its directory first if given, -json, the rest.
func goTestArgs(a string) []string {
	fields := strings.Fields(a)
	// -C must come first.
	if len(fields) >= 2 && fields[0] == "-C" {
		return append([]string{"test", "-C", fields[1], "-json"}, fields[2:]...)
	}
	return append([]string{"test", "-json"}, fields...)
}

// flagValue returns the value of the flag name (given as "-name value" or
// "-name=value") in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// runCommand runs one go test command and reads its events; it returns
// false when the command failed without a failed test or package to say
// why.
func (s *summary) runCommand(cmdArgs []string, stderr io.Writer) bool {
	line := "go " + strings.Join(cmdArgs, " ")
	s.printf("== %s\n", line)
	start := time.Now()
	cmd := exec.Command(goCommand(), cmdArgs...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		s.printf("FAIL: %s: %v\n", line, err)
		return false
	}
	failures := s.read(out)
	err = cmd.Wait()
	s.printf("== done in %s: %s\n", time.Since(start).Round(time.Second), line)
	if err != nil && failures == 0 {
		s.printf("FAIL: %s: %v\n", line, err)
		return false
	}
	return true
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// printf writes to the output under s.mu.
func (s *summary) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format, args...)
}

// goCommand returns the go command to run: $GO, else go.
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// read consumes one go test -json stream and returns the number of tests
// and packages that failed in it.
func (s *summary) read(r io.Reader) int {
	failures := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			s.printf("%s\n", line)
			continue
		}
		if e.Action == "fail" {
			failures++
		}
		s.mu.Lock()
		s.handle(e)
		s.mu.Unlock()
	}
	return failures
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

// report prints the totals, the skipped tests and what the run left out
// (omitted, run by target all), and returns the exit status.
func (s *summary) report(d time.Duration, ci, cmdFailed bool, omitted []string, all string) int {
	failed := len(s.failed) + len(s.pkgFailed)
	fmt.Fprintf(s.w, "\n== totals (%s)\n", d.Round(time.Second))
	for _, r := range append(s.pkgFailed, s.failed...) {
		fmt.Fprintf(s.w, "  failed %s %s\n", r.pkg, r.test)
	}
	fmt.Fprintf(s.w, "%d passed, %d failed, %d skipped\n", len(s.passed), failed, len(s.skipped))
	for _, r := range s.skipped {
		fmt.Fprintf(s.w, "  skipped %s %s: %s\n", r.pkg, r.test, skipReason(r.output))
	}
	if len(omitted) > 0 {
		where := ""
		if all != "" {
			where = ", run by " + all
		}
		fmt.Fprintf(s.w, "not selected (not counted above%s):\n", where)
		for _, o := range omitted {
			fmt.Fprintf(s.w, "  %s\n", o)
		}
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
