package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Environment variables with the servers' DSNs.
const (
	envPGDSN    = "TXRETRY_PG_DSN"
	envMySQLDSN = "TXRETRY_MYSQL_DSN"
	envTiDBDSN  = "TXRETRY_TIDB_DSN"
)

// errUsage is matched by errors in the flags.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	if spec := os.Getenv(childEnv); spec != "" {
		code := childMain(ctx, spec, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	code := mainCode(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// mainCode runs the command and returns its exit status.
func mainCode(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "txbench:", err)
		return 2
	}
	var progress io.Writer
	if !cfg.quiet {
		progress = stderr
	}
	if cfg.cpuProfile != "" {
		stop, err := startCPUProfile(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "txbench:", err)
			return 2
		}
		defer stop()
	}
	results, runErr := runAll(ctx, cfg, progress)
	if runErr != nil {
		fmt.Fprintln(stderr, "txbench:", runErr)
	}
	code := 0
	if runErr != nil {
		code = 1
	}
	if len(results) == 0 {
		return code
	}
	if failed, err := report(cfg, results, stdout); err != nil {
		fmt.Fprintln(stderr, "txbench:", err)
		code = 1
	} else if failed {
		fmt.Fprintln(stderr, "txbench: consistency check failed")
		code = 1
	}
	return code
}

// report writes the table or TSV to stdout, and the TSV file and the chart
// if asked, and reports whether a consistency check failed.
func report(cfg *config, results []runResult, stdout io.Writer) (checkFailed bool, err error) {
	names := make([]string, len(cfg.runners))
	for i, r := range cfg.runners {
		names[i] = r.name
	}
	ref := referenceRunner(names)
	sums := summarize(results, names, ref)
	for _, r := range results {
		if !r.check.ok() {
			checkFailed = true
		}
	}
	if cfg.format == "tsv" {
		err = writeTSV(stdout, tsvRows(sums))
	} else {
		err = writeTable(stdout, cfg, sums, ref)
	}
	if err != nil {
		return checkFailed, err
	}
	if cfg.tsvPath != "" {
		f, err := os.Create(cfg.tsvPath)
		if err != nil {
			return checkFailed, err
		}
		if err := writeTSV(f, tsvRows(sums)); err != nil {
			_ = f.Close()
			return checkFailed, err
		}
		if err := f.Close(); err != nil {
			return checkFailed, err
		}
	}
	if cfg.chartPath != "" {
		return checkFailed, writeChart(cfg.chartPath, sums)
	}
	return checkFailed, nil
}

// referenceRunner is the runner the ratios compare with: txretry when it
// runs, else the first one.
func referenceRunner(names []string) string {
	for _, n := range names {
		if n == "txretry" {
			return n
		}
	}
	return names[0]
}

// parseFlags reads the flags and the DSN environment variables.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("txbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &config{}
	var workloads, runners, drivers, procs, arrivalsFlag string
	fs.IntVar(&cfg.workers, "workers", 32, "concurrent workers (serial always uses 1)")
	fs.StringVar(&procs, "procs", "1", "comma list of process counts to spread the workers over (1: in this process)")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "length of one run")
	fs.DurationVar(&cfg.deadline, "deadline", time.Second, "deadline of one call (context.WithTimeout)")
	fs.IntVar(&cfg.repeat, "repeat", 3, "runs per runner, interleaved")
	fs.StringVar(&workloads, "workload", "all", "comma list of workloads: "+strings.Join(names(allWorkloads, func(w workloadSpec) string { return w.name }), ", "))
	fs.StringVar(&runners, "runners", "all", "comma list of runners: "+strings.Join(names(allRunners, func(r runner) string { return r.name }), ", "))
	fs.StringVar(&drivers, "driver", "pgx,mysql", "comma list of drivers: "+strings.Join(names(allDrivers, func(d driverSpec) string { return d.name }), ", "))
	fs.StringVar(&cfg.pgDSN, "pg-dsn", getenv(envPGDSN), "PostgreSQL DSN (default $"+envPGDSN+")")
	fs.StringVar(&cfg.mysqlDSN, "mysql-dsn", getenv(envMySQLDSN), "MySQL/MariaDB DSN for go-sql-driver (default $"+envMySQLDSN+")")
	fs.StringVar(&cfg.tidbDSN, "tidb-dsn", getenv(envTiDBDSN), "TiDB DSN for go-sql-driver, driver tidb (default $"+envTiDBDSN+")")
	fs.StringVar(&cfg.format, "format", "table", "output on stdout: table or tsv")
	fs.StringVar(&cfg.tsvPath, "tsv", "", "also write the TSV report to this file")
	fs.StringVar(&cfg.chartPath, "chart", "", "also draw goodput and failed calls against -procs, per workload and driver, as a PNG in this file")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the workers' random choices")
	fs.Float64Var(&cfg.open.Rate, "rate", 0, "open loop: calls arriving per second over all processes (0: closed loop)")
	fs.StringVar(&arrivalsFlag, "arrivals", "poisson", "open loop's arrivals: poisson or uniform")
	fs.IntVar(&cfg.open.MaxInflight, "max-inflight", 0, "open loop: calls queued or running at once over all processes, beyond which arrivals are dropped (0: 10 x -workers)")
	fs.BoolVar(&cfg.quiet, "q", false, "no progress lines on stderr")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole invocation to this file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	var err error
	switch {
	case cfg.workers < 1 || cfg.workers > 10_000:
		err = fmt.Errorf("%w: -workers must be in 1..10000", errUsage)
	case cfg.duration <= 0:
		err = fmt.Errorf("%w: -duration must be positive", errUsage)
	case cfg.deadline <= 0:
		err = fmt.Errorf("%w: -deadline must be positive", errUsage)
	case cfg.repeat < 1:
		err = fmt.Errorf("%w: -repeat must be at least 1", errUsage)
	case cfg.format != "table" && cfg.format != "tsv":
		err = fmt.Errorf("%w: -format must be table or tsv", errUsage)
	case !(cfg.open.Rate >= 0 && cfg.open.Rate <= 1e6):
		err = fmt.Errorf("%w: -rate must be in 0..1000000 calls/s", errUsage)
	case arrivalsFlag != "poisson" && arrivalsFlag != "uniform":
		err = fmt.Errorf("%w: -arrivals must be poisson or uniform", errUsage)
	case cfg.open.MaxInflight < 0 || cfg.open.MaxInflight > 1_000_000:
		err = fmt.Errorf("%w: -max-inflight must be in 0..1000000", errUsage)
	}
	if err != nil {
		return nil, err
	}
	cfg.open.Poisson = arrivalsFlag == "poisson"
	if cfg.open.MaxInflight == 0 {
		cfg.open.MaxInflight = 10 * cfg.workers
	}
	if cfg.open.Rate > 0 && cfg.open.MaxInflight < cfg.workers {
		return nil, fmt.Errorf("%w: -max-inflight must be at least -workers", errUsage)
	}
	if cfg.procs, err = parseProcs(procs, cfg.workers); err != nil {
		return nil, err
	}
	if cfg.workloads, err = pick("workload", workloads, allWorkloads, func(w workloadSpec) string { return w.name }); err != nil {
		return nil, err
	}
	if cfg.runners, err = pick("runner", runners, allRunners, func(r runner) string { return r.name }); err != nil {
		return nil, err
	}
	if cfg.drivers, err = pick("driver", drivers, allDrivers, func(d driverSpec) string { return d.name }); err != nil {
		return nil, err
	}
	for _, d := range cfg.drivers {
		if cfg.dsn(d) != "" {
			continue
		}
		if d.name == driverTiDB {
			return nil, fmt.Errorf("%w: driver %s needs $%s or -tidb-dsn", errUsage, d.name, envTiDBDSN)
		}
		if d.dialect == dialectMySQL {
			return nil, fmt.Errorf("%w: driver %s needs $%s or -mysql-dsn", errUsage, d.name, envMySQLDSN)
		}
		return nil, fmt.Errorf("%w: driver %s needs $%s or -pg-dsn", errUsage, d.name, envPGDSN)
	}
	return cfg, nil
}

// parseProcs parses the comma list of -procs: distinct process counts in
// 1..workers, in the list's order.
func parseProcs(list string, workers int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := strconv.Atoi(f)
		if err != nil || p < 1 || p > workers {
			return nil, fmt.Errorf("%w: -procs: %q is not a process count in 1..%d (-workers)", errUsage, f, workers)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no -procs selected", errUsage)
	}
	return out, nil
}

func names[T any](all []T, name func(T) string) []string {
	out := make([]string, len(all))
	for i, x := range all {
		out[i] = name(x)
	}
	return out
}

// pick returns the entries of all named in the comma list (in the list's
// order), or all of them for "all".
func pick[T any](what, list string, all []T, name func(T) string) ([]T, error) {
	if strings.TrimSpace(list) == "all" {
		return all, nil
	}
	var out []T
	seen := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		found := false
		for _, x := range all {
			if name(x) == n {
				out = append(out, x)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: unknown %s %q (known: %s)", errUsage, what, n, strings.Join(names(all, name), ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no %s selected", errUsage, what)
	}
	return out, nil
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
