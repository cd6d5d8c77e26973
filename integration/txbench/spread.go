package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// childEnv, when set, makes txbench a child process of a spread run: its
// value is the JSON childSpec of the child's share of the run.
const childEnv = "TXBENCH_CHILD"

// childMargin is how long past its run a spread run may take before its
// children are killed: opening the pools, warming them up, reporting.
const childMargin = setupTimeout + time.Minute

// childSpec is what a child runs: one runner on one workload and driver, with
// workers first..first+Workers-1 of a run of Total workers, against the
// tables its parent created.
type childSpec struct {
	Workload, Driver, Runner string
	DSN                      string
	First, Workers, Total    int
	Seed                     uint64
	Duration, Deadline       time.Duration
	Open                     openLoop // this child's share of the open loop
}

// childReport is a child's raw record of its run, as JSON on its stdout.
type childReport struct {
	Lat                                                 []time.Duration
	Calls, InDeadline, Late, Exhausted, Deadline, Other int64
	Uncertain, Cut, Attempts, Commits                   int64
	Window, Wait                                        time.Duration
	Dropped                                             int64
	Codes                                               map[string]int64
	CommittedIDs, UncertainIDs                          []int64
	OtherSample                                         string
	Classes                                             [nClasses]classStats
}

func reportOf(s *stats) childReport {
	return childReport{
		Lat: s.lat, Calls: s.calls, InDeadline: s.inDeadline, Late: s.late, Exhausted: s.exhausted,
		Deadline: s.deadline, Other: s.other, Uncertain: s.uncertain, Cut: s.cut, Attempts: s.attempts,
		Commits: s.commits, Window: s.window, Wait: s.wait, Dropped: s.dropped, Codes: s.codes, CommittedIDs: s.committedIDs,
		UncertainIDs: s.uncertainIDs, OtherSample: s.otherSample, Classes: s.classes,
	}
}

func (c *childReport) stats() stats {
	s := stats{
		lat: c.Lat, calls: c.Calls, inDeadline: c.InDeadline, late: c.Late, exhausted: c.Exhausted,
		deadline: c.Deadline, other: c.Other, uncertain: c.Uncertain, cut: c.Cut, attempts: c.Attempts,
		commits: c.Commits, window: c.Window, wait: c.Wait, dropped: c.Dropped, codes: c.Codes, committedIDs: c.CommittedIDs,
		uncertainIDs: c.UncertainIDs, otherSample: c.OtherSample, classes: c.Classes,
	}
	if s.codes == nil {
		s.codes = map[string]int64{}
	}
	return s
}

// share returns the workers of process i of procs when n workers are spread
// as evenly as possible, and the index of its first worker.
func share(n, procs, i int) (first, workers int) {
	q, r := n/procs, n%procs
	return i*q + min(i, r), q + btoi(i < r)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// runSpread runs n workers of r spread over procs child processes (re-execs
// of this binary), releases them together once all are ready, and returns
// the stats each reported.
func runSpread(ctx context.Context, cfg *config, ws workloadSpec, ds driverSpec, r *runner, n, procs int, seed uint64) ([]stats, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// The children die with this context, with the parent (their stdin
	// closes) or past the run plus a generous margin.
	ctx, cancel := context.WithTimeout(ctx, cfg.duration+cfg.deadline+childMargin)
	defer cancel()

	type child struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stdout *bufio.Reader
		stderr bytes.Buffer
	}
	children := make([]*child, 0, procs)
	// failed returns err with the stderr of child i, each line prefixed.
	failed := func(i int, err error) error {
		msg := strings.TrimRight(children[i].stderr.String(), "\n")
		if msg != "" {
			msg = "\n\tchild " + fmt.Sprint(i) + ": " + strings.ReplaceAll(msg, "\n", "\n\tchild "+fmt.Sprint(i)+": ")
		}
		return fmt.Errorf("child %d: %w%s", i, err, msg)
	}
	waited := false
	// waitAll closes the children's stdin and waits for them to exit.
	waitAll := func() error {
		waited = true
		var errs []error
		for i, c := range children {
			c.stdin.Close()
			if err := c.cmd.Wait(); err != nil {
				errs = append(errs, failed(i, err))
			}
		}
		return errors.Join(errs...)
	}
	defer func() {
		if !waited {
			cancel()
			_ = waitAll()
		}
	}()
	// abort kills the children and returns err with child i's stderr.
	abort := func(i int, err error) error {
		cancel()
		_ = waitAll()
		return failed(i, err)
	}

	for i := range procs {
		first, workers := share(n, procs, i)
		spec, err := json.Marshal(childSpec{
			Workload: ws.name, Driver: ds.name, Runner: r.name, DSN: cfg.dsn(ds),
			First: first, Workers: workers, Total: n, Seed: seed,
			Duration: cfg.duration, Deadline: cfg.deadline, Open: cfg.open.share(workers, n),
		})
		if err != nil {
			return nil, err
		}
		c := &child{cmd: exec.CommandContext(ctx, exe)}
		c.cmd.Env = append(os.Environ(), childEnv+"="+string(spec))
		c.cmd.Stderr = &c.stderr
		c.cmd.WaitDelay = 5 * time.Second
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			return nil, err
		}
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		c.stdout = bufio.NewReader(out)
		if err := c.cmd.Start(); err != nil {
			return nil, err
		}
		children = append(children, c)
	}
	for i, c := range children {
		if line, err := c.stdout.ReadString('\n'); err != nil || line != "ready\n" {
			return nil, abort(i, fmt.Errorf("not ready: %q %v", line, err))
		}
	}
	// Release them all at once.
	for i, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return nil, abort(i, err)
		}
	}
	parts := make([]stats, procs)
	for i, c := range children {
		var rep childReport
		if err := json.NewDecoder(c.stdout).Decode(&rep); err != nil {
			return nil, abort(i, fmt.Errorf("read report: %w", err))
		}
		parts[i] = rep.stats()
	}
	if err := waitAll(); err != nil {
		return nil, err
	}
	return parts, nil
}

// childMain runs the child of a spread run described by spec (see childEnv):
// it opens its pool, writes "ready" on stdout, waits for a line on stdin,
// runs, and writes its childReport as JSON on stdout. It stops if stdin
// closes. It returns the exit status.
func childMain(ctx context.Context, spec string, stdin io.Reader, stdout, stderr io.Writer) int {
	if err := runChild(ctx, spec, stdin, stdout); err != nil {
		fmt.Fprintln(stderr, "txbench child:", err)
		return 1
	}
	return 0
}

func runChild(ctx context.Context, specJSON string, stdin io.Reader, stdout io.Writer) error {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	ws, ok1 := find(allWorkloads, func(w workloadSpec) bool { return w.name == spec.Workload })
	ds, ok2 := find(allDrivers, func(d driverSpec) bool { return d.name == spec.Driver })
	r, ok3 := find(allRunners, func(r runner) bool { return r.name == spec.Runner })
	if !ok1 || !ok2 || !ok3 || spec.Workers < 1 {
		return fmt.Errorf("bad spec %s", specJSON)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sctx, scancel := context.WithTimeout(ctx, setupTimeout)
	defer scancel()
	c, err := ds.open(sctx, spec.DSN, spec.Workers)
	if err != nil {
		return err
	}
	defer c.close()
	wl := newWorkloadRun(ws, ds, spec.Total, spec.Seed)
	useIsolation(c, wl)
	in := bufio.NewReader(stdin)
	ready := func() error {
		if _, err := io.WriteString(stdout, "ready\n"); err != nil {
			return err
		}
		if _, err := in.ReadString('\n'); err != nil {
			return fmt.Errorf("wait for the start: %w", err)
		}
		go func() {
			_, _ = io.Copy(io.Discard, in)
			cancel() // the parent is gone
		}()
		return nil
	}
	st, err := runWorkers(ctx, c, wl, &r, spec.First, spec.Workers, spec.Seed, spec.Duration, spec.Deadline, spec.Open, ready)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(reportOf(&st))
}

// find returns the first x of all for which match holds.
func find[T any](all []T, match func(T) bool) (T, bool) {
	for _, x := range all {
		if match(x) {
			return x, true
		}
	}
	var zero T
	return zero, false
}
