package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txretry/txretry/txretry"
)

// setupTimeout bounds opening a run's pool, recreating its tables and checking
// them afterwards.
const setupTimeout = 2 * time.Minute

// config is what the flags select.
type config struct {
	workers    int
	procs      []int // process counts of the spreads (-procs)
	duration   time.Duration
	deadline   time.Duration
	repeat     int
	workloads  []workloadSpec
	runners    []runner
	drivers    []driverSpec
	pgDSN      string
	mysqlDSN   string
	tidbDSN    string
	seed       uint64
	format     string // "table" or "tsv"
	tsvPath    string
	chartPath  string
	quiet      bool
	cpuProfile string
	// open is the open loop of all processes (-rate, -arrivals,
	// -max-inflight); Rate 0: the closed loop.
	open openLoop
}

func (c *config) dsn(d driverSpec) string {
	if d.name == driverTiDB {
		return c.tidbDSN
	}
	if d.dialect == dialectMySQL {
		return c.mysqlDSN
	}
	return c.pgDSN
}

// runResult is the record of one run of one runner.
type runResult struct {
	workload, driver, runner string
	repeat                   int // 1-based
	workers                  int // of all processes
	procs                    int // processes the workers were spread over
	duration, deadline       time.Duration
	rate                     float64 // open loop's arrivals per second; 0: closed loop
	st                       stats   // merged over the workers; per-call slices dropped after the check
	p50, p99, p999           time.Duration
	classP50, classP99       [nClasses]time.Duration // p50 and p99 of each class's calls
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

// combo is one cell of the matrix: a runner with its workers spread over
// procs processes.
type combo struct {
	r     *runner
	procs int
}

// combos returns every (runner, spread) pair of cfg, runner by runner; a
// runner with a fixed worker count (serial) runs once, in one process.
func combos(cfg *config) []combo {
	var out []combo
	for i := range cfg.runners {
		r := &cfg.runners[i]
		if r.workers > 0 {
			out = append(out, combo{r, 1})
			continue
		}
		for _, p := range cfg.procs {
			out = append(out, combo{r, p})
		}
	}
	return out
}

// runAll runs every runner at every spread of every workload and driver
// cfg.repeat times, interleaved, and returns the results of the runs made,
// even on error. progress, if not nil, gets one line per run.
func runAll(ctx context.Context, cfg *config, progress io.Writer) ([]runResult, error) {
	var results []runResult
	cells := combos(cfg)
	total := len(cfg.workloads) * len(cfg.drivers) * cfg.repeat * len(cells)
	done := 0
	for _, ws := range cfg.workloads {
		for _, ds := range cfg.drivers {
			for rep := range cfg.repeat {
				for k := range cells {
					// Round robin: each repeat starts at the next cell.
					cell := cells[(k+rep)%len(cells)]
					r := cell.r
					res, err := runOne(ctx, cfg, ws, ds, r, cell.procs, rep)
					if err != nil {
						return results, fmt.Errorf("%s/%s/%s procs %d repeat %d: %w", ws.name, ds.name, r.name, cell.procs, rep+1, err)
					}
					results = append(results, res)
					done++
					if progress != nil {
						fmt.Fprintf(progress, "[%d/%d] %s %s %s procs %d #%d: %.0f tx/s, fail %.1f%%, p99 %s ms, check %s\n",
							done, total, ws.name, ds.name, r.name, cell.procs, rep+1, res.goodput(),
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
// for cfg.duration (in this process, or spread over procs child processes),
// then the consistency check over the calls of all processes.
func runOne(ctx context.Context, cfg *config, ws workloadSpec, ds driverSpec, r *runner, procs, rep int) (runResult, error) {
	n := cfg.workers
	if r.workers > 0 {
		n, procs = r.workers, 1
	}
	res := runResult{
		workload: ws.name, driver: ds.name, runner: r.name, repeat: rep + 1,
		workers: n, procs: procs, duration: cfg.duration, deadline: cfg.deadline, rate: cfg.open.Rate,
	}
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	poolSize := n
	if procs > 1 {
		poolSize = 1 // the children have their own pools
	}
	c, err := ds.open(sctx, cfg.dsn(ds), poolSize)
	if err != nil {
		return res, err
	}
	defer c.close()
	seed := cfg.seed + uint64(rep)
	wl := newWorkloadRun(ws, ds, n, seed)
	useIsolation(c, wl)
	if err := wl.prepare(sctx, c); err != nil {
		return res, err
	}

	if procs > 1 {
		parts, err := runSpread(ctx, cfg, ws, ds, r, n, procs, seed)
		if err != nil {
			return res, err
		}
		res.st = mergeStats(parts)
	} else {
		if res.st, err = runWorkers(ctx, c, wl, r, 0, n, seed, cfg.duration, cfg.deadline, cfg.open, nil); err != nil {
			return res, err
		}
	}
	res.p50, res.p99, res.p999 = percentiles(res.st.lat)
	for i := range res.st.classes {
		res.classP50[i], res.classP99[i], _ = percentiles(res.st.classes[i].Lat)
	}

	cctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	res.check, err = wl.check(cctx, c, res.st.committedIDs, res.st.uncertainIDs)
	if err != nil {
		return res, fmt.Errorf("check: %w", err)
	}
	// The summaries need only the counts: free the per-call slices.
	res.st.lat, res.st.committedIDs, res.st.uncertainIDs = nil, nil, nil
	for i := range res.st.classes {
		res.st.classes[i].Lat = nil
	}
	return res, nil
}

// mergeStats merges the stats of several workers or processes.
func mergeStats(parts []stats) stats {
	st := newStats()
	for i := range parts {
		st.merge(&parts[i])
	}
	return st
}

// percentiles sorts lat and returns its p50, p99 and p99.9.
func percentiles(lat []time.Duration) (p50, p99, p999 time.Duration) {
	slices.Sort(lat)
	return percentile(lat, 500), percentile(lat, 990), percentile(lat, 999)
}

// runWorkers runs n workers (global indexes first..first+n-1) on c for
// duration, in a closed loop or in the open loop ol, and returns their
// merged stats. ready, if not nil, is called once the workers are waiting
// to start; the run starts when it returns.
func runWorkers(ctx context.Context, c conn, wl *workloadRun, r *runner, first, n int, seed uint64,
	duration, deadline time.Duration, ol openLoop, ready func() error) (stats, error) {
	var runOpts []txretry.Option
	if r.opts != nil {
		var err error
		if runOpts, err = r.opts(); err != nil {
			return stats{}, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := make([]*worker, n)
	start := make(chan struct{})
	var end time.Time
	var wg sync.WaitGroup
	var queue chan arrival
	var inflight atomic.Int64
	if ol.Rate > 0 {
		queue = make(chan arrival, ol.MaxInflight)
	}
	done := func() { inflight.Add(-1) }
	for i := range workers {
		w := newWorker(first+i, c, wl, r, runOpts, seed)
		workers[i] = w
		if queue != nil {
			wg.Go(func() { w.serve(ctx, start, &end, deadline, queue, done) })
		} else {
			wg.Go(func() { w.loop(ctx, start, &end, deadline) })
		}
	}
	var err error
	if ready != nil {
		if err = ready(); err != nil {
			cancel() // the workers stop at once
		}
	}
	begin := time.Now()
	end = begin.Add(duration)
	close(start)
	var dropped int64
	if queue != nil {
		if err == nil {
			dropped = schedule(newArrivals(ol, seed, first), begin, end, first, n, &inflight, queue,
				func(t time.Time) bool { return sleepUntil(ctx, t) })
		}
		close(queue)
	}
	wg.Wait()
	if err != nil {
		return stats{}, err
	}
	if err := ctx.Err(); err != nil {
		return stats{}, err
	}
	parts := make([]stats, n)
	for i, w := range workers {
		parts[i] = w.st
	}
	st := mergeStats(parts)
	st.dropped = dropped
	return st, nil
}
