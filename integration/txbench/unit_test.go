package main

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

func durations(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i + 1)
	}
	return out
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		name     string
		sorted   []time.Duration
		perMille int
		want     time.Duration
	}{
		{"empty", nil, 500, 0},
		{"one value", []time.Duration{7}, 999, 7},
		{"p50 of 1..100", durations(100), 500, 50},
		{"p99 of 1..100", durations(100), 990, 99},
		{"p99.9 of 1..100 is the max", durations(100), 999, 100},
		{"p99.9 of 1..1000", durations(1000), 999, 999},
		{"p99.9 of 1..10000", durations(10000), 999, 9990},
		{"p50 of 1..3", durations(3), 500, 2},
		{"p50 of 1..4 (nearest rank)", durations(4), 500, 2},
		{"p100", durations(10), 1000, 10},
		{"below range clamps to min", durations(10), -5, 1},
		{"above range clamps to max", durations(10), 2000, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.perMille); got != tt.want {
				t.Errorf("percentile(%d values, %d‰) = %d, want %d", len(tt.sorted), tt.perMille, got, tt.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	floats := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 10, 1000}, 10},
	}
	for _, tt := range floats {
		in := slices.Clone(tt.in)
		if got := median(in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
		if !slices.Equal(in, tt.in) {
			t.Errorf("median modified its argument: %v", in)
		}
	}
	if got := median([]int64{5, 1, 4, 2}); got != 3 {
		t.Errorf("median(int64 5,1,4,2) = %d, want 3", got)
	}
	if lo, hi := minMax([]float64{3, 1, 2}); lo != 1 || hi != 3 {
		t.Errorf("minMax = %v, %v; want 1, 3", lo, hi)
	}
}

func TestStatsRecordAndMerge(t *testing.T) {
	base := time.Unix(1000, 0)
	end := base.Add(10 * time.Second)
	dl := time.Second
	a, b := newStats(), newStats()
	a.record(1, classHot, outCommitted, 1, base, base.Add(100*time.Millisecond), end, dl)        // in deadline
	a.record(2, classHot, outCommitted, 3, base, base.Add(1500*time.Millisecond), end, dl)       // late
	a.record(3, classHot, outExhausted, 10, base, base.Add(200*time.Millisecond), end, dl)       // exhausted
	b.record(4, classHot, outDeadline, 4, base, base.Add(time.Second), end, dl)                  // deadline
	b.record(5, classHot, outUncertain, 1, base, base.Add(time.Millisecond), end, dl)            // uncertain
	b.record(6, classHot, outOther, 1, base, base.Add(time.Millisecond), end, dl)                // other
	b.record(7, classHot, outCommitted, 2, end.Add(-time.Second), end.Add(time.Second), end, dl) // cut: counted at 1 s
	a.codes["40001"] = 2
	b.codes["40001"] = 3
	b.codes["none"] = 1
	a.merge(&b)
	got := fmt.Sprint(a.calls, a.inDeadline, a.late, a.exhausted, a.deadline, a.uncertain, a.other, a.cut, a.attempts, a.commits)
	if want := fmt.Sprint(7, 1, 1, 1, 1, 1, 1, 1, 22, 3); got != want {
		t.Errorf("counts = %s, want %s", got, want)
	}
	if !slices.Equal(a.committedIDs, []int64{1, 2, 7}) || !slices.Equal(a.uncertainIDs, []int64{5}) {
		t.Errorf("ids: committed %v uncertain %v", a.committedIDs, a.uncertainIDs)
	}
	if a.codes["40001"] != 5 || a.codes["none"] != 1 {
		t.Errorf("codes = %v", a.codes)
	}
	if len(a.lat) != 7 || a.lat[6] != time.Second {
		t.Errorf("latencies = %v; want 7, the cut call at 1s", a.lat)
	}
}

func TestCompareIDs(t *testing.T) {
	tests := []struct {
		name                string
		db, told, uncertain []int64
		lost, unrep, ghosts int
		ok                  bool
	}{
		{"equal", []int64{1, 2}, []int64{2, 1}, nil, 0, 0, 0, true},
		{"lost commit", []int64{1}, []int64{1, 2}, nil, 1, 0, 0, false},
		{"commit reported failed", []int64{1, 3}, []int64{1}, nil, 0, 1, 0, false},
		{"uncertain that committed", []int64{1, 3}, []int64{1}, []int64{3, 4}, 0, 0, 1, true},
		{"empty", nil, nil, nil, 0, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := compareIDs(tt.db, tt.told, tt.uncertain)
			if r.lost != tt.lost || r.unreported != tt.unrep || r.ghosts != tt.ghosts || r.ok() != tt.ok {
				t.Errorf("got lost %d unreported %d ghosts %d ok %v (%s)", r.lost, r.unreported, r.ghosts, r.ok(), r)
			}
		})
	}
}

func TestFullJitterBounds(t *testing.T) {
	j := fullJitter(2*time.Millisecond, 200*time.Millisecond)
	tests := []struct {
		retry int
		max   time.Duration
	}{{1, 2 * time.Millisecond}, {2, 4 * time.Millisecond}, {7, 128 * time.Millisecond}, {8, 200 * time.Millisecond}, {40, 200 * time.Millisecond}}
	for _, tt := range tests {
		if got := j(tt.retry, 0.999999); got > tt.max || got < tt.max*99/100 {
			t.Errorf("retry %d: %v, want just under %v", tt.retry, got, tt.max)
		}
		if got := j(tt.retry, 0); got != 0 {
			t.Errorf("retry %d with rnd 0: %v, want 0", tt.retry, got)
		}
	}
}

func TestClassifyTxretry(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want outcome
	}{
		{"nil", live, nil, outCommitted},
		{"uncertain", live, &txretry.CommitUncertainError{Err: io.EOF}, outUncertain},
		{"attempt limit", live, &txretry.RetryError{Reason: "attempt limit", Cause: txretry.ErrRetriesExhausted}, outExhausted},
		{"retry budget", live, &txretry.RetryError{Reason: "retry budget", Cause: txretry.ErrRetriesExhausted}, outExhausted},
		{"deadline", live, &txretry.RetryError{Reason: "deadline", Cause: txretry.ErrRetriesExhausted}, outDeadline},
		{"context", ended, &txretry.RetryError{Reason: "context", Cause: context.Canceled}, outDeadline},
		{"statement cut by deadline", ended, context.Canceled, outDeadline},
		{"other", live, errors.New("boom"), outOther},
	}
	for _, tt := range tests {
		if got := classifyTxretry(tt.ctx, tt.err); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestRebindAndSeed(t *testing.T) {
	q := "INSERT INTO t (a, b) VALUES ($1, $2)"
	if got := rebind(dialectMySQL, q); got != "INSERT INTO t (a, b) VALUES (?, ?)" {
		t.Errorf("rebind MySQL = %q", got)
	}
	if got := rebind(dialectPG, q); got != q {
		t.Errorf("rebind PG = %q", got)
	}
	stmts := seedStatements("acct", 2500)
	if len(stmts) != 3 || strings.Count(strings.Join(stmts, ""), "(") != 2500+3 {
		t.Errorf("seedStatements: %d statements", len(stmts))
	}
	if !strings.HasSuffix(stmts[2], fmt.Sprintf("(2500,%d)", initialBalance)) {
		t.Errorf("last seed statement ends %q", stmts[2][len(stmts[2])-20:])
	}
}

func TestTransfersAreReproducible(t *testing.T) {
	a := newWorkloadRun(allWorkloads[1], allDrivers[0], 3, 7)
	b := newWorkloadRun(allWorkloads[1], allDrivers[1], 3, 7)
	for w := range 3 {
		for seq := range ringSize + 2 {
			ta, oka := a.transferOf(callID(w, seq))
			tb, okb := b.transferOf(callID(w, seq))
			if !oka || !okb || ta != tb || ta.src == ta.dst || ta.src < 1 || ta.src > 10 || ta.dst < 1 || ta.dst > 10 || ta.amount < 1 {
				t.Fatalf("worker %d call %d: %+v %+v", w, seq, ta, tb)
			}
		}
	}
	if _, ok := a.transferOf(callID(3, 0)); ok {
		t.Error("transferOf accepted a call of a worker that does not exist")
	}
}

// TiDB's workloads read with locking reads (see driverSpec.lockingReads),
// the others with plain ones.
func TestTiDBWorkloadsLockTheirReads(t *testing.T) {
	for _, ws := range allWorkloads {
		for _, ds := range allDrivers {
			w := newWorkloadRun(ws, ds, 2, 1)
			for _, sel := range []string{w.hot.sel, w.xfer.sel} {
				if got := strings.HasSuffix(sel, " FOR UPDATE"); sel != "" && got != (ds.name == driverTiDB) {
					t.Errorf("%s on %s: read %q", ws.name, ds.name, sel)
				}
			}
		}
	}
}

func TestWriteTSV(t *testing.T) {
	var buf bytes.Buffer
	rows := [][]string{{"a", "b"}, {"x\ty", "line\nbreak\r"}, {"", "z"}}
	if err := writeTSV(&buf, rows); err != nil {
		t.Fatal(err)
	}
	want := "a\tb\nx y\tline break \n\tz\n"
	if buf.String() != want {
		t.Errorf("writeTSV = %q, want %q", buf.String(), want)
	}
}

func TestAlignRows(t *testing.T) {
	got := alignRows([][]string{{"runner", "n", "note"}, {"txretry", "123", "x"}, {"a", "4", "long note"}}, 1, 2)
	want := []string{
		"runner     n  note",
		"txretry  123  x",
		"a          4  long note",
	}
	if !slices.Equal(got, want) {
		t.Errorf("alignRows:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// fakeRun returns a result with the given goodput over a 10 s run.
func fakeRun(runner string, repeat int, committed int64, codes map[string]int64) runResult {
	return runResult{
		workload: "hot", driver: "pgx", runner: runner, repeat: repeat, workers: 32, procs: 1,
		duration: 10 * time.Second, deadline: time.Second,
		st: stats{calls: committed + 10, inDeadline: committed, commits: committed, exhausted: 10,
			attempts: 2 * committed, codes: codes},
		p50: 5 * time.Millisecond, p99: 250 * time.Millisecond, p999: 900 * time.Millisecond,
	}
}

func TestSummaryAndTSVReport(t *testing.T) {
	results := []runResult{
		fakeRun("txretry", 1, 1000, map[string]int64{"40001": 10}),
		fakeRun("jitter", 1, 500, map[string]int64{"40001": 100, "40P01": 1}),
		fakeRun("jitter", 2, 800, map[string]int64{"40001": 300}),
		fakeRun("txretry", 2, 2000, map[string]int64{"40001": 30}),
		fakeRun("jitter", 3, 300, map[string]int64{"40001": 200, "40P01": 3}),
		fakeRun("txretry", 3, 1500, nil),
	}
	results[4].check = checkResult{ghosts: 2}
	sums := summarize(results, []string{"txretry", "jitter"}, "txretry")
	if len(sums) != 2 || sums[0].runner != "txretry" || sums[1].runner != "jitter" {
		t.Fatalf("summaries: %+v", sums)
	}
	j := &sums[1]
	byCol := map[string]metric{}
	for _, m := range metrics {
		byCol[m.col] = m
	}
	if g := j.median(byCol["goodput_tps"]); g != 50 {
		t.Errorf("median goodput %v, want 50", g)
	}
	// Per-repeat ratios 0.5, 0.4, 0.2: median 0.4 (not 50/150).
	if r := j.median(byCol["ratio"]); math.Abs(r-0.4) > 1e-9 {
		t.Errorf("median ratio %v, want 0.4", r)
	}
	if lo, hi := j.goodputRange(); lo != 30 || hi != 80 {
		t.Errorf("goodput range %v-%v", lo, hi)
	}
	if c := j.codes(); c != "40001:200 40P01:1" {
		t.Errorf("codes %q", c)
	}
	if c := j.checks(); c != "ok 3/3 +2 ghost" {
		t.Errorf("checks %q", c)
	}

	rows := tsvRows(sums)
	if len(rows) != 1+6+2 {
		t.Fatalf("%d TSV rows", len(rows))
	}
	col := slices.Index(rows[0], "goodput_tps")
	last := rows[len(rows)-1]
	if last[2] != "jitter" || last[3] != "median" || last[col] != "50" {
		t.Errorf("median row %v", last)
	}
	for _, r := range rows {
		if len(r) != len(rows[0]) {
			t.Fatalf("row with %d cells, header has %d: %v", len(r), len(rows[0]), r)
		}
	}

	var buf bytes.Buffer
	cfg := &config{workers: 32, duration: 10 * time.Second, deadline: time.Second, repeat: 3}
	if err := writeTable(&buf, cfg, sums, "txretry"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== hot / pgx:", "txretry ", "jitter ", "30-80", "0.40"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestSerialWindowBound: the serial runner's share of time inside its
// transactions' snapshot windows gives the bound on overlap that the table
// notes (90% of the time: at most 1.11x serial); runners without the
// measurement show none.
func TestSerialWindowBound(t *testing.T) {
	var results []runResult
	for rep, share := range []float64{0.88, 0.9, 0.95} {
		r := fakeRun("serial", rep+1, 1000, nil)
		r.workers = 1
		r.st.window = time.Duration(share * float64(r.duration))
		results = append(results, r, fakeRun("jitter", rep+1, 500, nil))
	}
	sums := summarize(results, []string{"serial", "jitter"}, "serial")
	if w := sums[0].median(metric{get: windowPct}); math.Abs(w-90) > 1e-9 {
		t.Errorf("serial window %v%%, want the median 90%%", w)
	}
	if w := sums[1].median(metric{get: windowPct}); !math.IsNaN(w) {
		t.Errorf("jitter window %v, want none", w)
	}
	var buf bytes.Buffer
	cfg := &config{workers: 32, duration: 10 * time.Second, deadline: time.Second, repeat: 3}
	if err := writeTable(&buf, cfg, sums, "serial"); err != nil {
		t.Fatal(err)
	}
	if want := "serial spends 90% of its time between a transaction's first statement and COMMIT's reply: " +
		"where any two transactions that overlap there conflict, no schedule commits more than 1.11x serial"; !strings.Contains(buf.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, buf.String())
	}
	if strings.Count(buf.String(), "spends") != 1 {
		t.Errorf("want one window note, for serial only:\n%s", buf.String())
	}
}

func TestParseFlags(t *testing.T) {
	env := map[string]string{envPGDSN: "postgres://x", envMySQLDSN: "root@tcp(x)/y"}
	getenv := func(k string) string { return env[k] }
	cfg, err := parseFlags(nil, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.workers != 32 || cfg.duration != 10*time.Second || cfg.deadline != time.Second || cfg.repeat != 3 ||
		len(cfg.workloads) != len(allWorkloads) || len(cfg.runners) != len(allRunners) || len(cfg.drivers) != 2 ||
		cfg.pgDSN != "postgres://x" {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, err = parseFlags([]string{"-workload", "transfer10k, hot", "-runners", "serial,txretry", "-driver", "pgxstdlib", "-pg-dsn", "postgres://y"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.workloads[0].name != "transfer10k" || cfg.runners[0].name != "serial" || cfg.drivers[0].name != "pgxstdlib" || cfg.pgDSN != "postgres://y" {
		t.Errorf("lists: %+v", cfg)
	}
	bad := [][]string{
		{"-workers", "0"}, {"-repeat", "0"}, {"-duration", "0s"}, {"-format", "csv"},
		{"-workload", "nope"}, {"-runners", ","}, {"-driver", "oracle"}, {"extra"},
	}
	for _, args := range bad {
		if _, err := parseFlags(args, getenv, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("parseFlags(%q) = %v, want errUsage", args, err)
		}
	}
	if _, err := parseFlags([]string{"-driver", "mysql"}, func(string) string { return "" }, io.Discard); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), envMySQLDSN) {
		t.Errorf("missing DSN: %v", err)
	}
	if _, err := parseFlags([]string{"-driver", "tidb"}, getenv, io.Discard); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), envTiDBDSN) {
		t.Errorf("missing TiDB DSN: %v", err)
	}
	env[envTiDBDSN] = "root@tcp(t)/test"
	if cfg, err := parseFlags([]string{"-driver", "tidb,mysql"}, getenv, io.Discard); err != nil || cfg.dsn(cfg.drivers[0]) != env[envTiDBDSN] || cfg.dsn(cfg.drivers[1]) != env[envMySQLDSN] {
		t.Errorf("tidb driver: %v", err)
	}
	if _, err := parseFlags([]string{"-h"}, getenv, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// "x serial" is the median of the per-repeat ratios to serial's goodput.
func TestVsSerialIsPerRepeat(t *testing.T) {
	results := []runResult{
		fakeRun("txretry", 1, 900, nil), fakeRun("serial", 1, 1000, nil),
		fakeRun("txretry", 2, 1800, nil), fakeRun("serial", 2, 1500, nil),
		fakeRun("txretry", 3, 500, nil), fakeRun("serial", 3, 1000, nil),
	}
	sums := summarize(results, []string{"txretry", "serial"}, "txretry")
	var vs metric
	for _, m := range metrics {
		if m.col == "vs_serial" {
			vs = m
		}
	}
	// Per-repeat ratios 0.9, 1.2, 0.5: median 0.9 (not 3200/3500).
	if got := sums[0].median(vs); math.Abs(got-0.9) > 1e-9 {
		t.Fatalf("txretry x serial = %v, want 0.9", got)
	}
	if got := sums[1].median(vs); got != 1 {
		t.Fatalf("serial x serial = %v, want 1", got)
	}
}

// A context error from database/sql's Commit proves nothing was committed
// only with go-sql-driver: pgx's stdlib commits under the BeginTx context
// and abandons a COMMIT in flight when it ends.
func TestSQLCommitContextErrorIsUncertainOnPostgreSQL(t *testing.T) {
	for _, tc := range []struct {
		dialect dialect
		err     error
		want    bool
	}{
		{dialectPG, context.DeadlineExceeded, false},
		{dialectPG, fmt.Errorf("commit: %w", context.Canceled), false},
		{dialectMySQL, context.DeadlineExceeded, true},
		{dialectPG, sql.ErrTxDone, true},
		{dialectMySQL, driver.ErrBadConn, true},
	} {
		c := &sqlConn{flavor: tc.dialect}
		if got := c.notCommitted(tc.err); got != tc.want {
			t.Errorf("dialect %v, %v: notCommitted = %v, want %v", tc.dialect, tc.err, got, tc.want)
		}
	}
}

// TestWindowIsCutAtTheRunsEnd: a committed call's window counts only up to
// the end of the run, so a serial worker's windows never exceed the run,
// even when its last call finishes long after the end.
func TestWindowIsCutAtTheRunsEnd(t *testing.T) {
	end := time.Unix(1000, 0)
	ms := func(d int) time.Time { return end.Add(time.Duration(d) * time.Millisecond) }
	tests := []struct {
		name       string
		began, fin time.Time
		want       time.Duration
	}{
		{"within the run", ms(-30), ms(-10), 20 * time.Millisecond},
		{"finished after the end", ms(-30), ms(50), 30 * time.Millisecond},
		{"began after the end", ms(10), ms(50), 0},
		{"began at the end", end, ms(50), 0},
		{"not committed through txretry", time.Time{}, ms(-10), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStats()
			s.addWindow(tt.began, tt.fin, end)
			if s.window != tt.want {
				t.Errorf("window %v, want %v", s.window, tt.want)
			}
		})
	}
}
