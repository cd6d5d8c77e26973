package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/txretry/txretry/txretry"
)

// setupTimeout bounds opening a run's pool, recreating its tables and checking
// them afterwards.
const setupTimeout = 2 * time.Minute

// config is what the flags select.
type config struct {
	workers    int
	duration   time.Duration
	deadline   time.Duration
	repeat     int
	workloads  []workloadSpec
	runners    []runner
	drivers    []driverSpec
	pgDSN      string
	mysqlDSN   string
	seed       uint64
	format     string // "table" or "tsv"
	tsvPath    string
	quiet      bool
	cpuProfile string
}

func (c *config) dsn(d driverSpec) string {
	if d.dialect == dialectMySQL {
		return c.mysqlDSN
	}
	return c.pgDSN
}

// runResult is the record of one run of one runner.
type runResult struct {
	workload, driver, runner string
	repeat                   int // 1-based
	workers                  int
	duration, deadline       time.Duration
	st                       stats // merged over the workers; per-call slices dropped after the check
	p50, p99, p999           time.Duration
	check                    checkResult
}

func (r *runResult) goodput() float64 {
	return float64(r.st.inDeadline) / r.duration.Seconds()
}

// pct returns 100*n/d, or 0 when d is 0.
func pct(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return 100 * float64(n) / float64(d)
}

// runAll runs every runner of every workload and driver cfg.repeat times,
// interleaved, and returns the results of the runs made, even on error.
// progress, if not nil, gets one line per run.
func runAll(ctx context.Context, cfg *config, progress io.Writer) ([]runResult, error) {
	var results []runResult
	total := len(cfg.workloads) * len(cfg.drivers) * cfg.repeat * len(cfg.runners)
	done := 0
	for _, ws := range cfg.workloads {
		for _, ds := range cfg.drivers {
			for rep := range cfg.repeat {
				for k := range cfg.runners {
					// Round robin: each repeat starts at the next runner.
					r := &cfg.runners[(k+rep)%len(cfg.runners)]
					res, err := runOne(ctx, cfg, ws, ds, r, rep)
					if err != nil {
						return results, fmt.Errorf("%s/%s/%s repeat %d: %w", ws.name, ds.name, r.name, rep+1, err)
					}
					results = append(results, res)
					done++
					if progress != nil {
						fmt.Fprintf(progress, "[%d/%d] %s %s %s #%d: %.0f tx/s, fail %.1f%%, p99 %s ms, check %s\n",
							done, total, ws.name, ds.name, r.name, rep+1, res.goodput(),
							pct(res.st.exhausted+res.st.deadline+res.st.uncertain+res.st.other, res.st.calls),
							fmtMS(res.p99), res.check)
					}
				}
			}
		}
	}
	return results, nil
}

// runOne makes one run: a fresh pool, fresh tables, the workers' closed loops
// for cfg.duration, then the consistency check.
func runOne(ctx context.Context, cfg *config, ws workloadSpec, ds driverSpec, r *runner, rep int) (runResult, error) {
	n := cfg.workers
	if r.workers > 0 {
		n = r.workers
	}
	res := runResult{
		workload: ws.name, driver: ds.name, runner: r.name, repeat: rep + 1,
		workers: n, duration: cfg.duration, deadline: cfg.deadline,
	}
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	c, err := ds.open(sctx, cfg.dsn(ds), n)
	if err != nil {
		return res, err
	}
	defer c.close()
	seed := cfg.seed + uint64(rep)
	wl := newWorkloadRun(ws, ds.dialect, n, seed)
	if err := wl.prepare(sctx, c); err != nil {
		return res, err
	}

	var runOpts []txretry.Option
	if r.opts != nil {
		if runOpts, err = r.opts(); err != nil {
			return res, err
		}
	}
	workers := make([]*worker, n)
	start := make(chan struct{})
	var end time.Time
	var wg sync.WaitGroup
	for i := range workers {
		w := newWorker(i, c, wl, r, runOpts, seed)
		workers[i] = w
		wg.Go(func() { w.loop(ctx, start, &end, cfg.deadline) })
	}
	end = time.Now().Add(cfg.duration)
	close(start)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}

	res.st = newStats()
	for _, w := range workers {
		res.st.merge(&w.st)
	}
	slices.Sort(res.st.lat)
	res.p50 = percentile(res.st.lat, 500)
	res.p99 = percentile(res.st.lat, 990)
	res.p999 = percentile(res.st.lat, 999)

	cctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	res.check, err = wl.check(cctx, c, res.st.committedIDs, res.st.uncertainIDs)
	if err != nil {
		return res, fmt.Errorf("check: %w", err)
	}
	// The summaries need only the counts: free the per-call slices.
	res.st.lat, res.st.committedIDs, res.st.uncertainIDs = nil, nil, nil
	return res, nil
}
