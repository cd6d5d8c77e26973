package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
)

// TestMain also runs the children of spread runs, which re-exec the test
// binary.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(context.Background(), spec, os.Stdin, os.Stdout, os.Stderr))
	}
	dbservertest.Main(m)
}

// TestBenchSmoke makes a short run of the hot workload with txretry and
// one hand-written loop (full jitter) on each driver of the test servers,
// in this process and spread over two child processes (-procs 1,2), and
// checks the consistency checks and the reports: the benchmark's end to
// end path on every driver. TestBenchAllRunners runs every runner on every
// workload.
func TestBenchSmoke(t *testing.T) {
	runners := pickNamed(t, allRunners, func(r runner) string { return r.name }, "txretry", "jitter")
	drivers := pickNamed(t, allDrivers, func(d driverSpec) string { return d.name }, "pgx", "mysql", "pgxstdlib")
	benchShortRun(t, allWorkloads[:1], runners, drivers)
}

// TestBenchAllRunners makes a short run of every runner on every workload
// and driver against the test servers (TiDB's from TXRETRY_TIDB_DSN), in
// this process and spread over two child processes (-procs 1,2), and checks
// that every consistency check passed and that the reports name every
// runner at every spread. The workloads that differ from mixed only by the
// fns given to txretry (mixed-mv) and the oltp ones have tests of their own
// (method_values_test.go, oltp_workload_test.go). About seven minutes under
// -race on two cores: make test leaves it to make test-all.
func TestBenchAllRunners(t *testing.T) {
	workloads := slices.DeleteFunc(slices.Clone(allWorkloads), func(w workloadSpec) bool { return w.oltp || w.methodValues })
	if testing.Short() {
		workloads = allWorkloads[:1]
	}
	benchShortRun(t, workloads, allRunners, allDrivers)
}

// pickNamed returns the elements of all with the given names, in that order.
func pickNamed[T any](t *testing.T, all []T, name func(T) string, names ...string) []T {
	t.Helper()
	var out []T
	for _, n := range names {
		v, ok := find(all, func(x T) bool { return name(x) == n })
		if !ok {
			t.Fatalf("no %q", n)
		}
		out = append(out, v)
	}
	return out
}

// benchShortRun runs each of runners on each of workloads for 300 ms per
// cell at 1 and 2 processes, one subtest per driver, and checks the
// results and both report formats.
func benchShortRun(t *testing.T, workloads []workloadSpec, runners []runner, drivers []driverSpec) {
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			cfg := &config{
				workers:   4,
				procs:     []int{1, 2},
				duration:  300 * time.Millisecond,
				deadline:  time.Second,
				repeat:    1,
				workloads: workloads,
				runners:   runners,
				drivers:   []driverSpec{d},
				seed:      1,
				format:    "table",
			}
			switch {
			case d.name == driverTiDB:
				cfg.tidbDSN = tidbDatabase(t)
			case d.dialect == dialectMySQL:
				cfg.mysqlDSN = dbservertest.MySQL(t)
			default:
				cfg.pgDSN = dbservertest.Postgres(t)
			}
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			results, err := runAll(ctx, cfg, io.Discard)
			if err != nil {
				t.Fatalf("runAll: %v", err)
			}
			cells := combos(cfg)
			if want := len(workloads) * len(cells); len(results) != want {
				t.Fatalf("%d results, want %d", len(results), want)
			}
			for _, r := range results {
				if !r.check.ok() {
					t.Errorf("%s %s: check %s", r.workload, r.runner, r.check)
				}
				if r.st.calls == 0 {
					t.Errorf("%s %s procs %d: no call made", r.workload, r.runner, r.procs)
				}
				// A 300 ms run of a peer policy on a loaded machine may commit
				// nothing (cenkalti sleeps 500 ms after a conflict) or meet a
				// stray error; txretry's own runners must commit and must not.
				report := t.Logf
				if strings.HasPrefix(r.runner, "txretry") {
					report = t.Errorf
				}
				if r.st.commits == 0 {
					report("%s %s: %d calls, no commit", r.workload, r.runner, r.st.calls)
				}
				if r.st.other > 0 {
					report("%s %s: %d other errors, e.g. %s", r.workload, r.runner, r.st.other, r.st.otherSample)
				}
				// The serial worker is inside a transaction most of the time.
				if w := windowPct(&r, refRuns{}); r.runner == "serial" && !(w > 0 && w <= 100) {
					t.Errorf("%s serial: window %v%% of the time, want within (0, 100]", r.workload, w)
				}
			}

			var table, tsv bytes.Buffer
			if failed, err := report(cfg, results, &table); err != nil || failed {
				t.Fatalf("report: failed=%v err=%v", failed, err)
			}
			cfg.format = "tsv"
			if _, err := report(cfg, results, &tsv); err != nil {
				t.Fatalf("report TSV: %v", err)
			}
			tsvLines := strings.Split(strings.TrimSuffix(tsv.String(), "\n"), "\n")
			if want := 1 + 2*len(results); len(tsvLines) != want { // header, runs, medians
				t.Errorf("TSV has %d lines, want %d", len(tsvLines), want)
			}
			for _, w := range workloads {
				for _, r := range runners {
					if !hasRow(table.String(), "== "+w.name+" / "+d.name, r.name+" ") {
						t.Errorf("table has no row for %s / %s", w.name, r.name)
					}
					if !strings.Contains(tsv.String(), w.name+"\t"+d.name+"\t"+r.name+"\tmedian\t") {
						t.Errorf("TSV has no median row for %s / %s", w.name, r.name)
					}
				}
				for _, c := range cells {
					workers := cfg.workers
					if c.r.workers > 0 {
						workers = c.r.workers
					}
					if !hasRow(table.String(), "== "+w.name+" / "+d.name, c.r.name+" ") ||
						!strings.Contains(tsv.String(), fmt.Sprintf("%s\t%s\t%s\tmedian\t%d\t%d\t", w.name, d.name, c.r.name, workers, c.procs)) {
						t.Errorf("no report of %s / %s procs %d", w.name, c.r.name, c.procs)
					}
				}
			}
			if t.Failed() {
				t.Log("\n" + table.String())
			}
		})
	}
}

// hasRow reports whether the table section whose header starts with section
// has a line starting with prefix.
func hasRow(table, section, prefix string) bool {
	in := false
	for _, line := range strings.Split(table, "\n") {
		switch {
		case strings.HasPrefix(line, "== "):
			in = strings.HasPrefix(line, section+":")
		case in && strings.HasPrefix(line, prefix):
			return true
		}
	}
	return false
}

// tidbDatabase creates a database for the test on the TiDB server of
// TXRETRY_TIDB_DSN (integration/cluster/tidb.sh writes it), dropped when the
// test ends, and returns its DSN. Without the variable the test is skipped,
// also under CI: the engine tests are the ones that require TiDB there.
func tidbDatabase(t *testing.T) string {
	t.Helper()
	raw := os.Getenv(envTiDBDSN)
	if raw == "" {
		t.Skipf("%s is not set: run integration/cluster/tidb.sh start, then source integration/cluster/.run/env", envTiDBDSN)
	}
	cfg, err := mysql.ParseDSN(raw)
	if err != nil {
		t.Fatalf("%s: %v", envTiDBDSN, err)
	}
	cfg.DBName = ""
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admin := sql.OpenDB(c)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "txbench_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("create database on %s: %v", envTiDBDSN, err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE "+name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}
