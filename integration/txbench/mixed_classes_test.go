package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func mixedSpec(t *testing.T) workloadSpec {
	t.Helper()
	ws, ok := find(allWorkloads, func(w workloadSpec) bool { return w.name == "mixed" })
	if !ok || !ws.mixed() || ws.accounts != 100_000 || ws.hotPct != 10 {
		t.Fatalf("mixed workload: %+v", ws)
	}
	return ws
}

// Each call of the mixed workload is, by its worker's seeded choices, the hot
// row's transaction with probability 10%, else a transfer between two
// distinct accounts; the choices are the same on every driver, and the pure
// workloads have one class only.
func TestMixedClassChoice(t *testing.T) {
	ws := mixedSpec(t)
	const workers = 8
	a := newWorkloadRun(ws, allDrivers[0], workers, 3)
	b := newWorkloadRun(ws, allDrivers[1], workers, 3)
	other := newWorkloadRun(ws, allDrivers[0], workers, 4)
	hot, calls, sameAsOtherSeed := 0, 0, 0
	var firstHot [workers]int
	for w := range workers {
		firstHot[w] = -1
		for seq := range ringSize {
			id := callID(w, seq)
			ta, _ := a.transferOf(id)
			tb, _ := b.transferOf(id)
			if ta != tb || a.classOf(id) != b.classOf(id) {
				t.Fatalf("worker %d call %d differs between drivers: %+v %+v", w, seq, ta, tb)
			}
			if a.classOf(id) == other.classOf(id) {
				sameAsOtherSeed++
			}
			calls++
			switch a.classOf(id) {
			case classHot:
				hot++
				if firstHot[w] < 0 {
					firstHot[w] = seq
				}
				if ta != (transfer{hot: true}) {
					t.Fatalf("hot call %d: %+v", seq, ta)
				}
			case classCold:
				if ta.src == ta.dst || ta.src < 1 || ta.src > 100_000 || ta.dst < 1 || ta.dst > 100_000 || ta.amount < 1 {
					t.Fatalf("transfer %d: %+v", seq, ta)
				}
			}
		}
	}
	// 32768 draws of probability 0.1: the standard deviation is 0.17%.
	if share := float64(hot) / float64(calls); share < 0.09 || share > 0.11 {
		t.Errorf("%d hot calls of %d (%.1f%%), want about 10%%", hot, calls, 100*share)
	}
	if sameAsOtherSeed == calls {
		t.Error("another seed gave the same classes")
	}
	if firstHot[0] == firstHot[1] && firstHot[1] == firstHot[2] && firstHot[2] == firstHot[3] {
		t.Errorf("workers share their choices: first hot calls at %v", firstHot)
	}
	for _, ws := range allWorkloads {
		if ws.mixed() || ws.oltp {
			continue
		}
		w := newWorkloadRun(ws, allDrivers[0], 2, 1)
		want := classCold
		if ws.accounts == 0 {
			want = classHot
		}
		for seq := range 1000 {
			if got := w.classOf(callID(seq%2, seq)); got != want {
				t.Fatalf("%s call %d: class %s, want %s", ws.name, seq, classNames[got], classNames[want])
			}
		}
	}
}

// In the split workload each worker runs one class only: 10% of the
// workers (at least one), spread over the indexes so that a spread over
// processes gives them to different processes, run only hot calls.
func TestSplitWorkersKeepTheirClass(t *testing.T) {
	ws, ok := find(allWorkloads, func(w workloadSpec) bool { return w.name == "split" })
	if !ok || !ws.mixed() || !ws.split || ws.accounts != 100_000 || ws.hotPct != 10 {
		t.Fatalf("split workload: %+v", ws)
	}
	for _, tc := range []struct {
		workers int
		hot     []int
	}{{32, []int{10, 21, 31}}, {8, []int{7}}, {1, []int{0}}, {100, []int{9, 19, 29, 39, 49, 59, 69, 79, 89, 99}}} {
		w := newWorkloadRun(ws, allDrivers[0], tc.workers, 1)
		var hot []int
		for worker := range tc.workers {
			cl := w.classOf(callID(worker, 0))
			for seq := range ringSize {
				if w.classOf(callID(worker, seq)) != cl {
					t.Fatalf("%d workers: worker %d changes class at call %d", tc.workers, worker, seq)
				}
			}
			if cl == classHot {
				hot = append(hot, worker)
			}
		}
		if !slices.Equal(hot, tc.hot) {
			t.Errorf("%d workers: hot workers %v, want %v", tc.workers, hot, tc.hot)
		}
	}
}

// txretry keys its contention control on the code pointer of the fn it is
// given: each class reaches it through a fn of its own, and every call of a
// class through the same one, on both kinds of driver.
func TestEachClassHasItsOwnFn(t *testing.T) {
	body := func(context.Context, querier) error { return nil }
	ptr := func(fn any) uintptr { return reflect.ValueOf(fn).Pointer() }
	for _, tc := range []struct {
		driver string
		fn     func(callClass) any
	}{
		{"pgx", func(cl callClass) any { return pgxFn(cl, body) }},
		{"database/sql", func(cl callClass) any { return sqlFn(cl, body) }},
	} {
		hot, cold := ptr(tc.fn(classHot)), ptr(tc.fn(classCold))
		if hot == cold {
			t.Errorf("%s: the hot and the cold calls share one fn", tc.driver)
		}
		if hot != ptr(tc.fn(classHot)) || cold != ptr(tc.fn(classCold)) {
			t.Errorf("%s: two calls of one class got different fns", tc.driver)
		}
	}
	// The fns run the body they were given.
	ran := 0
	count := func(context.Context, querier) error { ran++; return nil }
	for _, cl := range []callClass{classHot, classCold} {
		_ = pgxFn(cl, count)(context.Background(), pgx.Tx(nil))
		_ = sqlFn(cl, count)(context.Background(), (*sql.Tx)(nil))
	}
	if ran != 4 {
		t.Errorf("the fns ran the body %d times, want 4", ran)
	}
}

// Each class's calls are counted apart, survive the children's JSON reports
// and merge; the per-class metrics are their goodput, failed calls, p99,
// calls in flight and mean queue time, "-" without calls or without txretry's events.
func TestPerClassStats(t *testing.T) {
	base := time.Unix(1000, 0)
	end := base.Add(10 * time.Second)
	dl := time.Second
	msAfter := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	a, b := newStats(), newStats()
	for i := range 100 { // 100 cold calls of 1..100 ms, committed
		a.record(int64(i), classCold, outCommitted, 1, base, msAfter(i+1), end, dl)
		a.addQueued(classCold, time.Millisecond)
	}
	b.record(200, classHot, outCommitted, 2, base, msAfter(10), end, dl)
	b.addQueued(classHot, 4*time.Millisecond)
	b.record(201, classHot, outDeadline, 5, base, msAfter(1000), end, dl)
	b.addQueued(classHot, 8*time.Millisecond)
	b.record(202, classHot, outCommitted, 1, base, msAfter(1500), end, dl) // late: not goodput, not failed
	b.record(203, classHot, outExhausted, 3, end.Add(-time.Second), end.Add(time.Second), end, dl)
	var parts []stats
	for _, s := range []stats{a, b} {
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(reportOf(&s)); err != nil {
			t.Fatal(err)
		}
		var rep childReport
		if err := json.NewDecoder(&buf).Decode(&rep); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, rep.stats())
	}
	st := mergeStats(parts)
	hot, cold := st.classes[classHot], st.classes[classCold]
	if got := fmt.Sprint(hot.Calls, hot.InDeadline, hot.Failed, hot.Finished, hot.Queued, len(hot.Lat)); got != "4 1 1 2 12ms 4" {
		t.Errorf("hot: %s", got)
	}
	if got := fmt.Sprint(cold.Calls, cold.InDeadline, cold.Failed, cold.Finished, cold.Queued, len(cold.Lat)); got != "100 100 0 100 100ms 100" {
		t.Errorf("cold: %s", got)
	}
	if st.calls != hot.Calls+cold.Calls || st.inDeadline != hot.InDeadline+cold.InDeadline || len(st.lat) != 104 {
		t.Errorf("totals: %d calls, %d in deadline, %d latencies", st.calls, st.inDeadline, len(st.lat))
	}

	r := runResult{workload: "mixed", driver: "pgx", runner: "txretry", repeat: 1, workers: 4, procs: 1,
		duration: 10 * time.Second, deadline: dl, st: st}
	for i := range r.st.classes {
		_, r.classP99[i], _ = percentiles(r.st.classes[i].Lat)
	}
	want := map[string]float64{
		"hot_goodput_tps": 0.1, "hot_fail_pct": 25, "hot_p99_ms": 1500, "hot_busy": 0.351, "hot_queue_ms": 6,
		"cold_goodput_tps": 10, "cold_fail_pct": 0, "cold_p99_ms": 99, "cold_busy": 0.505, "cold_queue_ms": 1,
	}
	for col, v := range want {
		if got := metricByCol(col).get(&r, refRuns{}); math.Abs(got-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", col, got, v)
		}
	}
	peer := r
	peer.st.classes[classHot].Finished, peer.st.classes[classHot].Queued = 0, 0
	peer.st.classes[classCold] = classStats{}
	for _, col := range []string{"hot_queue_ms", "cold_goodput_tps", "cold_fail_pct", "cold_p99_ms", "cold_busy", "cold_queue_ms"} {
		if m := metricByCol(col); m.format(m.get(&peer, refRuns{})) != "-" {
			t.Errorf("%s without calls or events: %v, want -", col, m.get(&peer, refRuns{}))
		}
	}
}

// mixedRun returns a run of the mixed workload whose classes' counts are
// scaled by k.
func mixedRun(runner string, repeat, procs int, k int64) runResult {
	r := fakeRun(runner, repeat, 100*k, nil)
	r.workload, r.procs = "mixed", procs
	r.st.classes[classHot] = classStats{Calls: 20 * k, InDeadline: 10 * k, Failed: 10 * k, Exhausted: 6 * k, Deadline: 4 * k,
		Attempts: 40 * k, Commits: 10 * k}
	r.st.classes[classCold] = classStats{Calls: 90 * k, InDeadline: 90 * k, Attempts: 90 * k, Commits: 90 * k}
	if strings.HasPrefix(runner, "txretry") {
		r.st.classes[classHot].Finished, r.st.classes[classHot].Queued = 10, time.Duration(k)*10*time.Millisecond
		r.st.classes[classCold].Finished, r.st.classes[classCold].Queued = 10, 0
	}
	r.classP99 = [nClasses]time.Duration{time.Duration(k) * 100 * time.Millisecond, 20 * time.Millisecond}
	r.classP50 = [nClasses]time.Duration{time.Duration(k) * 10 * time.Millisecond, 2 * time.Millisecond}
	return r
}

// The per-class medians over the repeats appear under the mixed workload's
// table, a row per runner, spread and class (goodput, failed calls by
// reason, attempts per commit, p50, p99, busy, queue), and in the TSV of
// every workload.
func TestPerClassReport(t *testing.T) {
	var results []runResult
	for rep := 1; rep <= 3; rep++ {
		for _, procs := range []int{1, 4} {
			results = append(results, mixedRun("txretry", rep, procs, int64(rep)), mixedRun("cenkalti", rep, procs, int64(rep)))
		}
		results = append(results, fakeRun("txretry", rep, 1000, nil)) // hot
	}
	sums := summarize(results, []string{"txretry", "cenkalti"}, "txretry")
	var tx *summary
	for i := range sums {
		if sums[i].workload == "mixed" && sums[i].runner == "txretry" && sums[i].procs == 4 {
			tx = &sums[i]
		}
	}
	if tx == nil {
		t.Fatalf("no summary of txretry at 4 processes: %+v", sums)
	}
	// Repeats with k = 1, 2, 3: the medians are k = 2's.
	for col, v := range map[string]float64{"hot_goodput_tps": 2, "hot_fail_pct": 50, "hot_exhausted_pct": 30, "hot_deadline_pct": 20,
		"hot_attempts_per_commit": 4, "hot_p50_ms": 20, "hot_p99_ms": 200, "hot_queue_ms": 2, "cold_goodput_tps": 18, "cold_queue_ms": 0} {
		if got := tx.median(metricByCol(col)); math.Abs(got-v) > 1e-9 {
			t.Errorf("median %s = %v, want %v", col, got, v)
		}
	}

	var buf bytes.Buffer
	cfg := &config{workers: 32, duration: 10 * time.Second, deadline: time.Second, repeat: 3}
	if err := writeTable(&buf, cfg, sums, "txretry"); err != nil {
		t.Fatal(err)
	}
	table := buf.String()
	mixed, hotSection, _ := strings.Cut(table[strings.Index(table, "== mixed"):], "== hot")
	if !matchLine(mixed, ` +runner +procs +wk +class +goodput/s +fail% +exh% +ddl% +unc% +oth% +att/commit +p50 ms +p99 ms +busy +queue ms$`) {
		t.Errorf("mixed table lacks the per-class header:\n%s", table)
	}
	for _, re := range []string{
		` +txretry +4 +32 +hot +2 +50\.0 +30\.0 +20\.0 +0\.0 +0\.0 +4\.00 +20\.0 +200 +0\.0 +2\.00$`,
		` +txretry +4 +32 +cold +18 +0\.0 +0\.0 +0\.0 +0\.0 +0\.0 +1\.00 +2\.00 +20\.0 +0\.0 +0\.00$`,
		` +cenkalti +1 +32 +hot +2 +50\.0 +30\.0 +20\.0 +0\.0 +0\.0 +4\.00 +20\.0 +200 +0\.0 +-$`,
	} {
		if !matchLine(mixed, re) {
			t.Errorf("mixed table has no line matching %q:\n%s", re, mixed)
		}
	}
	if strings.Contains(hotSection, "by class") {
		t.Errorf("the hot workload's table has classes:\n%s", table)
	}

	rows := tsvRows(sums)
	hotCol, coldCol := slices.Index(rows[0], "hot_queue_ms"), slices.Index(rows[0], "cold_goodput_tps")
	if hotCol < 0 || coldCol < 0 {
		t.Fatalf("TSV header %v", rows[0])
	}
	var medians int
	for _, r := range rows[1:] {
		if len(r) != len(rows[0]) {
			t.Fatalf("row of %d cells, header %d", len(r), len(rows[0]))
		}
		if r[0] == "mixed" && r[2] == "txretry" && r[3] == "median" {
			medians++
			if r[coldCol] != "18" || r[hotCol] != "2.00" {
				t.Errorf("median row %v", r)
			}
		}
	}
	if medians != 2 {
		t.Errorf("%d median rows of txretry on mixed, want one per spread", medians)
	}
}

func matchLine(text, pattern string) bool {
	for _, line := range strings.Split(text, "\n") {
		if ok, _ := regexp.MatchString("^"+pattern, line); ok {
			return true
		}
	}
	return false
}

// fakeDB runs a workload's transactions in memory and answers its check's
// queries: a conn (check) and a querier (body) at once, through two types
// since their exec methods differ.
type fakeDB struct {
	w       *workloadRun
	hot     int64
	hotLog  []int64
	bal     map[int64]int64
	xferLog []int64 // call_id, src, dst, amount
}

type fakeTx struct{ db *fakeDB }

func (q fakeTx) queryInt(_ context.Context, s string, args ...any) (int64, error) {
	switch s {
	case q.db.w.hot.sel:
		return q.db.hot, nil
	case q.db.w.xfer.sel:
		if b, ok := q.db.bal[args[0].(int64)]; ok {
			return b, nil
		}
		return initialBalance, nil
	}
	return 0, fmt.Errorf("unexpected query %q", s)
}

func (q fakeTx) queryInts(_ context.Context, s string, _ int, _ ...any) ([]int64, error) {
	return nil, fmt.Errorf("unexpected query %q", s)
}

func (q fakeTx) execCount(_ context.Context, s string, _ ...any) (int64, error) {
	return 0, fmt.Errorf("unexpected statement %q", s)
}

func (q fakeTx) exec(_ context.Context, s string, args ...any) error {
	f := q.db
	switch s {
	case f.w.hot.upd:
		f.hot = args[0].(int64)
	case f.w.hot.ins:
		f.hotLog = append(f.hotLog, args[0].(int64))
	case f.w.xfer.upd:
		f.bal[args[1].(int64)] = args[0].(int64)
	case f.w.xfer.ins:
		f.xferLog = append(f.xferLog, args[0].(int64), args[1].(int64), args[2].(int64), args[3].(int64))
	default:
		return fmt.Errorf("unexpected statement %q", s)
	}
	return nil
}

type fakeConn struct {
	conn // nil: only queryInts is called
	db   *fakeDB
}

func (c fakeConn) queryInts(_ context.Context, q string, _ int) ([]int64, error) {
	f := c.db
	switch q {
	case "SELECT v FROM txbench_hot":
		return []int64{f.hot}, nil
	case "SELECT call_id FROM txbench_hot_log":
		return f.hotLog, nil
	case "SELECT call_id, src, dst, amount FROM " + f.w.log:
		return f.xferLog, nil
	case "SELECT id, balance FROM " + f.w.acct + " ORDER BY id":
		out := make([]int64, 0, 2*f.w.spec.accounts)
		for id := int64(1); id <= int64(f.w.spec.accounts); id++ {
			b, ok := f.bal[id]
			if !ok {
				b = initialBalance
			}
			out = append(out, id, b)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected query %q", q)
}

// The mixed workload's check covers both tables: the hot counter against the
// committed hot calls, the balances against the committed transfers, and
// every logged call against what its caller was told.
func TestMixedCheck(t *testing.T) {
	ws := mixedSpec(t)
	w := newWorkloadRun(ws, allDrivers[0], 2, 1)
	db := &fakeDB{w: w, bal: map[int64]int64{}}
	var committed, uncertain []int64
	var hot int
	for seq := range 300 {
		id := callID(seq%2, seq/2)
		if seq%10 == 3 { // failed: not run
			continue
		}
		if err := w.body(id)(context.Background(), fakeTx{db}); err != nil {
			t.Fatal(err)
		}
		if w.classOf(id) == classHot {
			hot++
		}
		if seq%10 == 7 { // uncertain, and committed: a ghost
			uncertain = append(uncertain, id)
			continue
		}
		committed = append(committed, id)
	}
	if hot == 0 || len(db.hotLog) != hot || len(db.xferLog)/4 != len(committed)+len(uncertain)-hot {
		t.Fatalf("%d hot calls, %d logged; %d transfers logged", hot, len(db.hotLog), len(db.xferLog)/4)
	}
	c := fakeConn{db: db}
	res, err := w.check(context.Background(), c, committed, uncertain)
	if err != nil || !res.ok() || res.ghosts != len(uncertain) {
		t.Fatalf("consistent run: %v %s, %d ghosts", err, res, res.ghosts)
	}

	for _, tc := range []struct {
		name    string
		corrupt func(f *fakeDB) func()
		want    string
	}{
		{"lost hot update", func(f *fakeDB) func() {
			f.hot--
			return func() { f.hot++ }
		}, "counter"},
		{"transfer logged on the hot row", func(f *fakeDB) func() {
			f.hotLog = append(f.hotLog, f.xferLog[0])
			f.hot++
			return func() { f.hotLog = f.hotLog[:len(f.hotLog)-1]; f.hot-- }
		}, "not hot calls"},
		{"money created", func(f *fakeDB) func() {
			src := f.xferLog[1] // an account that a transfer wrote
			f.bal[src]++
			return func() { f.bal[src]-- }
		}, "sum of balances"},
		{"committed hot call missing", func(f *fakeDB) func() {
			log := f.hotLog
			i := slices.IndexFunc(log, func(id int64) bool { return slices.Contains(committed, id) })
			f.hotLog, f.hot = slices.Delete(slices.Clone(log), i, i+1), f.hot-1
			return func() { f.hotLog, f.hot = log, f.hot+1 }
		}, "missing"},
	} {
		undo := tc.corrupt(db)
		res, err := w.check(context.Background(), c, committed, uncertain)
		undo()
		if err != nil || res.ok() || !strings.Contains(res.String(), tc.want) {
			t.Errorf("%s: %v %s, want a problem with %q", tc.name, err, res, tc.want)
		}
	}
	if res, _ := w.check(context.Background(), c, committed, uncertain); !res.ok() {
		t.Fatalf("undo left %s", res)
	}
}

// txbench without -workload runs the mixed workload too (make bench names it).
func TestMixedRunsByDefault(t *testing.T) {
	cfg, err := parseFlags(nil, func(string) string { return "x" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(cfg.workloads, func(w workloadSpec) bool { return w.name == "mixed" }) {
		t.Errorf("default workloads %v lack mixed", names(cfg.workloads, func(w workloadSpec) string { return w.name }))
	}
	if cfg, err := parseFlags([]string{"-workload", "mixed", "-chart", "c.png"}, func(string) string { return "x" }, io.Discard); err != nil ||
		len(cfg.workloads) != 1 || cfg.chartPath != "c.png" {
		t.Errorf("-workload mixed -chart c.png: %v %+v", err, cfg)
	}
}
