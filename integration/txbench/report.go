package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// metric is one number computed from a run, reported per run (TSV) and as the
// median over the repeats (table and TSV).
type metric struct {
	col   string // TSV column
	head  string // table header; empty: TSV only
	get   func(r *runResult, x refRuns) float64
	digit int // decimals; -1: milliseconds with adaptive decimals
	// class: a metric of class cls's calls (classMetrics), in the table
	// only under the table of a workload of several classes.
	class bool
	cls   callClass
	// open: in the table only in the open loop (-rate).
	open bool
}

func failures(r *runResult) int64 {
	return r.st.exhausted + r.st.deadline + r.st.uncertain + r.st.other
}

// goodputRatio is r's goodput over ref's, NaN without ref.
func goodputRatio(r, ref *runResult) float64 {
	if ref == nil || ref.goodput() == 0 {
		return math.NaN()
	}
	return r.goodput() / ref.goodput()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var metrics = append([]metric{
	{col: "goodput_tps", head: "goodput/s", digit: 0, get: func(r *runResult, _ refRuns) float64 { return r.goodput() }},
	{col: "ratio", head: "ratio", digit: 2, get: func(r *runResult, x refRuns) float64 { return goodputRatio(r, x.ref) }},
	{col: "vs_serial", head: "x serial", digit: 2, get: func(r *runResult, x refRuns) float64 { return goodputRatio(r, x.serial) }},
	{col: "fail_pct", head: "fail%", digit: 1, get: func(r *runResult, _ refRuns) float64 { return pct(failures(r), r.st.calls) }},
	{col: "exhausted_pct", head: "exh%", digit: 1, get: func(r *runResult, _ refRuns) float64 { return pct(r.st.exhausted, r.st.calls) }},
	{col: "deadline_pct", head: "ddl%", digit: 1, get: func(r *runResult, _ refRuns) float64 { return pct(r.st.deadline, r.st.calls) }},
	{col: "uncertain_pct", head: "unc%", digit: 1, get: func(r *runResult, _ refRuns) float64 { return pct(r.st.uncertain, r.st.calls) }},
	{col: "other_pct", head: "oth%", digit: 1, get: func(r *runResult, _ refRuns) float64 { return pct(r.st.other, r.st.calls) }},
	{col: "late_pct", head: "late%", digit: 1, get: func(r *runResult, _ refRuns) float64 { return pct(r.st.late, r.st.calls) }},
	{col: "attempts_per_commit", head: "att/commit", digit: 2, get: func(r *runResult, _ refRuns) float64 {
		if r.st.commits == 0 {
			return math.NaN()
		}
		return float64(r.st.attempts) / float64(r.st.commits)
	}},
	{col: "p50_ms", head: "p50 ms", digit: -1, get: func(r *runResult, _ refRuns) float64 { return ms(r.p50) }},
	{col: "p99_ms", head: "p99 ms", digit: -1, get: func(r *runResult, _ refRuns) float64 { return ms(r.p99) }},
	{col: "p999_ms", head: "p99.9 ms", digit: -1, get: func(r *runResult, _ refRuns) float64 { return ms(r.p999) }},
	{col: "drop_pct", head: "drop%", open: true, digit: 1, get: func(r *runResult, _ refRuns) float64 {
		return pct(r.st.dropped, r.st.calls+r.st.dropped)
	}},
	{col: "wait_ms", head: "wait ms", open: true, digit: -1, get: func(r *runResult, _ refRuns) float64 {
		if r.rate == 0 || r.st.calls == 0 {
			return math.NaN()
		}
		return ms(r.st.wait / time.Duration(r.st.calls))
	}},
	{col: "window_pct", digit: 1, get: windowPct},
	{col: "offered_tps", digit: 1, get: func(r *runResult, _ refRuns) float64 { return r.rate }},
	{col: "dropped", get: func(r *runResult, _ refRuns) float64 { return float64(r.st.dropped) }},
	{col: "calls", get: func(r *runResult, _ refRuns) float64 { return float64(r.st.calls) }},
	{col: "committed_in_deadline", get: func(r *runResult, _ refRuns) float64 { return float64(r.st.inDeadline) }},
	{col: "late", get: func(r *runResult, _ refRuns) float64 { return float64(r.st.late) }},
	{col: "exhausted", get: func(r *runResult, _ refRuns) float64 { return float64(r.st.exhausted) }},
	{col: "deadline", get: func(r *runResult, _ refRuns) float64 { return float64(r.st.deadline) }},
	{col: "uncertain", get: func(r *runResult, _ refRuns) float64 { return float64(r.st.uncertain) }},
	{col: "other", get: func(r *runResult, _ refRuns) float64 { return float64(r.st.other) }},
	{col: "cut", get: func(r *runResult, _ refRuns) float64 { return float64(r.st.cut) }},
	{col: "attempts", get: func(r *runResult, _ refRuns) float64 { return float64(r.st.attempts) }},
	{col: "commits", get: func(r *runResult, _ refRuns) float64 { return float64(r.st.commits) }},
}, classMetrics()...)

// classMetrics returns, for each class of calls (column prefix its name,
// '-' as '_'), its goodput, failed calls (all, then by reason), attempts per
// commit, p50, p99, mean calls in flight (busy: by Little's law, at a given
// goodput latency grows with it) and mean queue time: NaN without a call of
// the class, and the queue time NaN for runners without txretry's events.
func classMetrics() []metric {
	type def struct {
		col, head string
		digit     int
		get       func(r *runResult, cl callClass, c *classStats) float64
	}
	defs := []def{
		{"goodput_tps", "goodput/s", 0, func(r *runResult, _ callClass, c *classStats) float64 {
			return float64(c.InDeadline) / r.duration.Seconds()
		}},
		{"fail_pct", "fail%", 1, func(_ *runResult, _ callClass, c *classStats) float64 { return pct(c.Failed, c.Calls) }},
		{"exhausted_pct", "exh%", 1, func(_ *runResult, _ callClass, c *classStats) float64 { return pct(c.Exhausted, c.Calls) }},
		{"deadline_pct", "ddl%", 1, func(_ *runResult, _ callClass, c *classStats) float64 { return pct(c.Deadline, c.Calls) }},
		{"uncertain_pct", "unc%", 1, func(_ *runResult, _ callClass, c *classStats) float64 { return pct(c.Uncertain, c.Calls) }},
		{"other_pct", "oth%", 1, func(_ *runResult, _ callClass, c *classStats) float64 { return pct(c.Other, c.Calls) }},
		{"attempts_per_commit", "att/commit", 2, func(_ *runResult, _ callClass, c *classStats) float64 {
			if c.Commits == 0 {
				return math.NaN()
			}
			return float64(c.Attempts) / float64(c.Commits)
		}},
		{"p50_ms", "p50 ms", -1, func(r *runResult, cl callClass, _ *classStats) float64 { return ms(r.classP50[cl]) }},
		{"p99_ms", "p99 ms", -1, func(r *runResult, cl callClass, _ *classStats) float64 { return ms(r.classP99[cl]) }},
		{"busy", "busy", 1, func(r *runResult, _ callClass, c *classStats) float64 { return c.Busy.Seconds() / r.duration.Seconds() }},
		{"queue_ms", "queue ms", -1, func(_ *runResult, _ callClass, c *classStats) float64 {
			if c.Finished == 0 {
				return math.NaN()
			}
			return ms(c.Queued / time.Duration(c.Finished))
		}},
	}
	var out []metric
	for cl := range nClasses {
		prefix := strings.ReplaceAll(classNames[cl], "-", "_") + "_"
		for _, d := range defs {
			out = append(out, metric{col: prefix + d.col, head: d.head, class: true, cls: cl, digit: d.digit,
				get: func(r *runResult, _ refRuns) float64 {
					if c := &r.st.classes[cl]; c.Calls > 0 {
						return d.get(r, cl, c)
					}
					return math.NaN()
				}})
		}
	}
	return out
}

// windowPct is the share of the workers' time that txretry's committed
// calls spent between their committing attempt's first statement and
// COMMIT's reply (see stats.window); NaN for other runners. For the serial
// runner it bounds what overlap can gain where any two transactions that
// overlap in that window conflict: no schedule commits more than 100/pct
// times serial.
func windowPct(r *runResult, _ refRuns) float64 {
	if r.st.window == 0 || r.duration == 0 || r.workers == 0 {
		return math.NaN()
	}
	return 100 * float64(r.st.window) / float64(r.duration*time.Duration(r.workers))
}

// format renders v with m's precision; NaN as "-".
func (m metric) format(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case m.digit >= 0:
		return strconv.FormatFloat(v, 'f', m.digit, 64)
	default:
		return fmtMSFloat(v)
	}
}

// fmtMS renders d in milliseconds with about three significant digits.
func fmtMS(d time.Duration) string { return fmtMSFloat(ms(d)) }

func fmtMSFloat(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

// summary gathers the runs of one runner at one spread on one workload and
// driver.
type summary struct {
	workload, driver, runner string
	workers, procs           int
	runs                     []*runResult
	refs                     []refRuns // per run: the runs it is compared with
}

// refRuns are the runs of the same repeat that a run is compared with: the
// reference runner's at the same spread and serial's, each nil if absent.
type refRuns struct{ ref, serial *runResult }

// summarize groups results by workload and driver (in order of appearance),
// runner (in runners' order) and spread (ascending), pairing each run with
// the ref runner's run of the same repeat and spread and serial's run of the
// same repeat.
func summarize(results []runResult, runners []string, ref string) []summary {
	type key struct {
		workload, driver, runner string
		procs                    int
	}
	type rkey struct {
		key
		repeat int
	}
	byRun := make(map[rkey]*runResult, len(results))
	serial := map[rkey]*runResult{} // serial runs in one process only; key without procs
	var groups []key                // workload and driver only
	seen := map[key]bool{}
	for i := range results {
		r := &results[i]
		byRun[rkey{key{r.workload, r.driver, r.runner, r.procs}, r.repeat}] = r
		if r.runner == "serial" {
			serial[rkey{key{workload: r.workload, driver: r.driver}, r.repeat}] = r
		}
		g := key{workload: r.workload, driver: r.driver}
		if !seen[g] {
			seen[g] = true
			groups = append(groups, g)
		}
	}
	var out []summary
	for _, g := range groups {
		for _, name := range runners {
			var spreads []int
			for i := range results {
				r := &results[i]
				if r.workload == g.workload && r.driver == g.driver && r.runner == name && !slices.Contains(spreads, r.procs) {
					spreads = append(spreads, r.procs)
				}
			}
			slices.Sort(spreads)
			for _, procs := range spreads {
				s := summary{workload: g.workload, driver: g.driver, runner: name, procs: procs}
				for i := range results {
					r := &results[i]
					if r.workload != g.workload || r.driver != g.driver || r.runner != name || r.procs != procs {
						continue
					}
					s.workers = r.workers
					s.runs = append(s.runs, r)
				}
				slices.SortFunc(s.runs, func(a, b *runResult) int { return cmp.Compare(a.repeat, b.repeat) })
				for _, r := range s.runs {
					s.refs = append(s.refs, refRuns{
						ref:    byRun[rkey{key{g.workload, g.driver, ref, procs}, r.repeat}],
						serial: serial[rkey{key{workload: g.workload, driver: g.driver}, r.repeat}],
					})
				}
				out = append(out, s)
			}
		}
	}
	return out
}

// median returns the median of m over the runs, ignoring NaNs (NaN if none).
func (s *summary) median(m metric) float64 {
	vals := make([]float64, 0, len(s.runs))
	for i, r := range s.runs {
		if v := m.get(r, s.refs[i]); !math.IsNaN(v) {
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		return math.NaN()
	}
	return median(vals)
}

// goodputRange returns the smallest and largest goodput of the runs.
func (s *summary) goodputRange() (lo, hi float64) {
	g := make([]float64, len(s.runs))
	for i, r := range s.runs {
		g[i] = r.goodput()
	}
	return minMax(g)
}

// codes renders the failed attempts per run by code (median over the runs),
// most frequent first, for example "40001:812 40P01:3".
func (s *summary) codes() string {
	all := map[string]bool{}
	for _, r := range s.runs {
		for c := range r.st.codes {
			all[c] = true
		}
	}
	type cc struct {
		code string
		n    int64
	}
	var list []cc
	for c := range all {
		per := make([]int64, len(s.runs))
		for i, r := range s.runs {
			per[i] = r.st.codes[c]
		}
		if m := median(per); m > 0 {
			list = append(list, cc{c, m})
		}
	}
	return formatCodes(list, func(x cc) (string, int64) { return x.code, x.n })
}

func formatCodes[T any](list []T, kv func(T) (string, int64)) string {
	slices.SortFunc(list, func(a, b T) int {
		ka, na := kv(a)
		kb, nb := kv(b)
		return cmp.Or(cmp.Compare(nb, na), cmp.Compare(ka, kb))
	})
	parts := make([]string, len(list))
	for i, x := range list {
		k, n := kv(x)
		parts[i] = k + ":" + strconv.FormatInt(n, 10)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// runCodes renders one run's failed attempts by code.
func runCodes(r *runResult) string {
	type cc struct {
		code string
		n    int64
	}
	list := make([]cc, 0, len(r.st.codes))
	for c, n := range r.st.codes {
		list = append(list, cc{c, n})
	}
	return formatCodes(list, func(x cc) (string, int64) { return x.code, x.n })
}

// checks renders the consistency checks of the runs: "ok 3/3", or
// "FAIL 1/3"; "+N ghost" counts uncertain calls that did commit.
func (s *summary) checks() string {
	ok, ghosts := 0, 0
	for _, r := range s.runs {
		if r.check.ok() {
			ok++
		}
		ghosts += r.check.ghosts
	}
	out := fmt.Sprintf("ok %d/%d", ok, len(s.runs))
	if ok < len(s.runs) {
		out = fmt.Sprintf("FAIL %d/%d", len(s.runs)-ok, len(s.runs))
	}
	if ghosts > 0 {
		out += fmt.Sprintf(" +%d ghost", ghosts)
	}
	return out
}

// writeTable writes the human report: one aligned table per workload and
// driver, then notes (failed checks, samples of "other" errors).
func writeTable(w io.Writer, cfg *config, sums []summary, ref string) error {
	bw := bufio.NewWriter(w)
	var tableMetrics, perClass []metric
	for _, m := range metrics {
		switch {
		case m.class:
			if m.cls == 0 {
				perClass = append(perClass, m)
			}
		case m.head != "" && (!m.open || cfg.open.Rate > 0):
			tableMetrics = append(tableMetrics, m)
		}
	}
	mode := ""
	if o := cfg.open; o.Rate > 0 {
		gaps := "even"
		if o.Poisson {
			gaps = "Poisson"
		}
		mode = fmt.Sprintf(" open loop: %g calls/s (%s), at most %d in flight, latency from arrival, wait = mean time queued for a worker;", o.Rate, gaps, o.MaxInflight)
	}
	for _, group := range groups(sums) {
		fmt.Fprintf(bw, "\n== %s / %s: %d workers, %s runs, %s deadline, %d repeat(s);%s medians, ratio = goodput / %s's in the same repeat and procs, x serial = goodput / serial's\n",
			group[0].workload, group[0].driver, cfg.workers, cfg.duration, cfg.deadline, cfg.repeat, mode, ref)
		head := []string{"runner", "procs", "wk"}
		for _, m := range tableMetrics {
			head = append(head, m.head)
			if m.col == "goodput_tps" {
				head = append(head, "min-max")
			}
		}
		head = append(head, "check", "failed attempts/run by code")
		rows := [][]string{head}
		var notes []string
		for i := range group {
			s := &group[i]
			row := []string{s.runner, strconv.Itoa(s.procs), strconv.Itoa(s.workers)}
			for _, m := range tableMetrics {
				row = append(row, m.format(s.median(m)))
				if m.col == "goodput_tps" {
					lo, hi := s.goodputRange()
					row = append(row, m.format(lo)+"-"+m.format(hi))
				}
			}
			row = append(row, s.checks(), s.codes())
			rows = append(rows, row)
			if w := s.median(metric{get: windowPct}); s.runner == "serial" && w > 0 {
				notes = append(notes, fmt.Sprintf("serial spends %.0f%% of its time between a transaction's first statement and COMMIT's reply: "+
					"where any two transactions that overlap there conflict, no schedule commits more than %.2fx serial", w, 100/w))
			}
			for _, r := range s.runs {
				if !r.check.ok() {
					notes = append(notes, fmt.Sprintf("%s procs %d #%d: check %s", s.runner, s.procs, r.repeat, r.check))
				}
				if r.st.otherSample != "" {
					notes = append(notes, fmt.Sprintf("%s procs %d #%d: %d other errors, e.g. %s", s.runner, s.procs, r.repeat, r.st.other, r.st.otherSample))
				}
			}
		}
		for _, line := range alignRows(rows, 1, len(head)-2) {
			fmt.Fprintln(bw, line)
		}
		if classes := classesOf(group[0].workload); len(classes) > 1 {
			fmt.Fprintln(bw, "  by class: goodput, failed calls (all, then by reason), attempts per commit and latency of "+
				"the class's calls, busy = their mean number in flight, queue = mean time txretry's calls waited for admission")
			rows := [][]string{{"runner", "procs", "wk", "class"}}
			for _, m := range perClass {
				rows[0] = append(rows[0], m.head)
			}
			for i := range group {
				s := &group[i]
				for _, cl := range classes {
					row := []string{s.runner, strconv.Itoa(s.procs), strconv.Itoa(s.workers), classNames[cl]}
					for _, m := range perClass {
						row = append(row, m.format(s.median(classMetric(cl, m))))
					}
					rows = append(rows, row)
				}
			}
			for _, line := range alignRows(rows, 1, len(rows[0])) {
				fmt.Fprintln(bw, "  "+line)
			}
		}
		for _, n := range notes {
			fmt.Fprintln(bw, "  note: "+n)
		}
	}
	return bw.Flush()
}

// classMetric returns the metric of class cl that m is for class 0.
func classMetric(cl callClass, m metric) metric {
	for _, x := range metrics {
		if x.class && x.cls == cl && x.head == m.head {
			return x
		}
	}
	return m
}

// groups splits sums into runs of the same workload and driver.
func groups(sums []summary) [][]summary {
	var out [][]summary
	for start := 0; start < len(sums); {
		end := start
		for end < len(sums) && sums[end].workload == sums[start].workload && sums[end].driver == sums[start].driver {
			end++
		}
		out = append(out, sums[start:end])
		start = end
	}
	return out
}

// alignRows pads cells to their column's width: columns before left and from
// trailing on are left-aligned (the last column is not padded), the others
// right-aligned; columns are separated by two spaces.
func alignRows(rows [][]string, left, trailing int) []string {
	var width []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	out := make([]string, len(rows))
	for j, row := range rows {
		var b strings.Builder
		for i, c := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case i < left || i >= trailing:
				b.WriteString(c)
				if i < len(row)-1 {
					b.WriteString(pad)
				}
			default:
				b.WriteString(pad + c)
			}
		}
		out[j] = b.String()
	}
	return out
}

// tsvRows returns the TSV report: a header, one row per run, then one row per
// summary with repeat "median".
func tsvRows(sums []summary) [][]string {
	head := []string{"workload", "driver", "runner", "repeat", "workers", "procs", "duration_s", "deadline_ms"}
	for _, m := range metrics {
		head = append(head, m.col)
	}
	head = append(head, "failed_attempts_by_code", "check", "ghosts")
	rows := [][]string{head}
	for _, s := range sums {
		for i, r := range s.runs {
			row := []string{r.workload, r.driver, r.runner, strconv.Itoa(r.repeat), strconv.Itoa(r.workers), strconv.Itoa(r.procs),
				strconv.FormatFloat(r.duration.Seconds(), 'f', -1, 64), strconv.FormatInt(r.deadline.Milliseconds(), 10)}
			for _, m := range metrics {
				row = append(row, m.format(m.get(r, s.refs[i])))
			}
			row = append(row, runCodes(r), r.check.String(), strconv.Itoa(r.check.ghosts))
			rows = append(rows, row)
		}
	}
	for _, s := range sums {
		r0 := s.runs[0]
		row := []string{s.workload, s.driver, s.runner, "median", strconv.Itoa(s.workers), strconv.Itoa(s.procs),
			strconv.FormatFloat(r0.duration.Seconds(), 'f', -1, 64), strconv.FormatInt(r0.deadline.Milliseconds(), 10)}
		for _, m := range metrics {
			row = append(row, m.format(s.median(m)))
		}
		ghosts := 0
		for _, r := range s.runs {
			ghosts += r.check.ghosts
		}
		row = append(row, s.codes(), s.checks(), strconv.Itoa(ghosts))
		rows = append(rows, row)
	}
	return rows
}

// tsvEscaper replaces the characters that would break a TSV cell.
var tsvEscaper = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")

// writeTSV writes rows as tab-separated values, one line per row, with tabs
// and line breaks inside cells replaced by spaces.
func writeTSV(w io.Writer, rows [][]string) error {
	bw := bufio.NewWriter(w)
	for _, row := range rows {
		for i, c := range row {
			if i > 0 {
				bw.WriteByte('\t')
			}
			bw.WriteString(tsvEscaper.Replace(c))
		}
		bw.WriteByte('\n')
	}
	return bw.Flush()
}
