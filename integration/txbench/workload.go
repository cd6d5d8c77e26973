package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// workloadSpec is a workload selectable with -workload.
type workloadSpec struct {
	name     string
	accounts int // 0: the single hot row
	// hotPct is the percentage of the calls of a workload with accounts
	// that run the hot row's transaction instead of a transfer (mixed).
	hotPct int
	// split: hotPct of the workers (at least one) run only the hot row's
	// transaction and the others only transfers, instead of every worker
	// drawing each call's class.
	split bool
	// oltp: the TPC-C-like mix of oltp.go instead of the hot row and
	// transfers.
	oltp bool
	// methodValues: each class reaches txretry as a method value of one
	// type (pgxCall, sqlCall), with no label, instead of a fn literal of its own.
	methodValues bool
	// labels: each call also gets WithLabel(its class's name), as a
	// careful user names each kind of transaction.
	labels bool
}

var allWorkloads = []workloadSpec{
	{name: "hot"},
	{name: "transfer10", accounts: 10},
	{name: "transfer10k", accounts: 10_000},
	{name: "mixed", accounts: 100_000, hotPct: 10},
	{name: "split", accounts: 100_000, hotPct: 10, split: true},
	{name: "mixed-mv", accounts: 100_000, hotPct: 10, methodValues: true},
	{name: "oltp", oltp: true, methodValues: true, labels: true},
	{name: "oltp-mv", oltp: true, methodValues: true},
}

// hotWorker reports whether worker i of n runs only hot calls in a split
// workload of hotPct: the workers where i·hotPct/100 passes a whole number,
// spread over the indexes and so over the processes (3 of 32 at 10%: 10,
// 21 and 31), at least one.
func hotWorker(i, n, hotPct int) bool {
	k := max(1, n*hotPct/100)
	return (i+1)*k/n > i*k/n
}

// hasHot reports whether some calls of the workload run on the hot row.
func (s workloadSpec) hasHot() bool { return !s.oltp && (s.accounts == 0 || s.hotPct > 0) }

// mixed reports whether the workload has calls of both the hot and the
// cold class.
func (s workloadSpec) mixed() bool { return s.accounts > 0 && s.hotPct > 0 }

// classes returns the classes of the workload's calls.
func (s workloadSpec) classes() []callClass {
	switch {
	case s.oltp:
		return []callClass{classNewOrder, classPayment, classOrderStatus, classDelivery, classStockLevel}
	case s.mixed():
		return []callClass{classHot, classCold}
	case s.accounts == 0:
		return []callClass{classHot}
	}
	return []callClass{classCold}
}

// classesOf returns the classes of the workload named name.
func classesOf(name string) []callClass {
	s, _ := find(allWorkloads, func(w workloadSpec) bool { return w.name == name })
	return s.classes()
}

// callClass is the transaction a call runs. txretry keys its contention
// control on where the fn it is given was written, so each class of mixed
// reaches txretry through a fn literal of its own (pgxFn, sqlFn); the
// workloads with methodValues pass a method of pgxCall or sqlCall per class
// instead.
type callClass uint8

const (
	classHot         callClass = iota // the hot row's read-then-write
	classCold                         // a transfer between two accounts
	classNewOrder                     // oltp: New-Order
	classPayment                      // oltp: Payment
	classOrderStatus                  // oltp: Order-Status
	classDelivery                     // oltp: Delivery
	classStockLevel                   // oltp: Stock-Level
	nClasses
)

// classNames are the classes' names in reports and labels.
var classNames = [nClasses]string{"hot", "cold", "new-order", "payment", "order-status", "delivery", "stock-level"}

const (
	// initialBalance of every account: large enough that no balance gets
	// near zero, so that no transfer is refused.
	initialBalance = 1_000_000_000
	// ringSize is the number of pre-generated transfers per worker; call n
	// of a worker uses transfer n mod ringSize.
	ringSize = 4096
	// seedBatch is the number of accounts inserted per statement.
	seedBatch = 1000
	// seqBits: a call id is worker<<seqBits | sequence number of the call.
	seqBits = 32
)

// transfer is one pre-generated transfer; in a mixed workload, hot marks a
// call of the hot row instead.
type transfer struct {
	src, dst, amount int64
	hot              bool
}

// callID returns the id of a worker's seq-th call.
func callID(worker, seq int) int64 { return int64(worker)<<seqBits | int64(uint32(seq)) }

// workloadRun is a workload prepared for one run on one dialect.
type workloadRun struct {
	spec      workloadSpec
	acct, log string // the transfers' table names
	hot, xfer stmts  // the statements of each class's transaction
	rings     [][]transfer
	// reset returns the statements that recreate and seed the tables,
	// built when the tables are prepared (seeding takes thousands of rows).
	reset func() []string
	oltp  *oltpRun // spec.oltp
	// iso, when not zero, replaces the driver's isolation level (oltp on
	// MySQL and MariaDB: REPEATABLE READ with locking reads).
	iso sql.IsolationLevel
}

// stmts are the statements of one class's transaction.
type stmts struct {
	sel, upd string // read and write of the row(s)
	ins      string // log insert
}

var placeholder = regexp.MustCompile(`\$[0-9]+`)

// rebind turns PostgreSQL placeholders ($1) into MySQL ones (?); the
// statements use their arguments in order.
func rebind(d dialect, q string) string {
	if d == dialectMySQL {
		return placeholder.ReplaceAllString(q, "?")
	}
	return q
}

// newWorkloadRun prepares spec for a run of workers workers on driver ds. The
// transfers of worker w depend only on seed and w, so every runner of a repeat
// gets the same ones.
func newWorkloadRun(spec workloadSpec, ds driverSpec, workers int, seed uint64) *workloadRun {
	d := ds.dialect
	w := &workloadRun{spec: spec}
	if spec.oltp {
		w.oltp = newOLTPRun(ds, seed)
		w.reset = func() []string { return oltpSchema(d, seed) }
		if d == dialectMySQL {
			w.iso = sql.LevelRepeatableRead
		}
		return w
	}
	lock := ""
	if ds.lockingReads {
		lock = " FOR UPDATE"
	}
	var reset []string
	if spec.hasHot() {
		w.hot = stmts{
			sel: "SELECT v FROM txbench_hot WHERE id = 1" + lock,
			upd: rebind(d, "UPDATE txbench_hot SET v = $1 WHERE id = 1"),
			ins: rebind(d, "INSERT INTO txbench_hot_log (call_id) VALUES ($1)"),
		}
		reset = append(reset,
			"DROP TABLE IF EXISTS txbench_hot, txbench_hot_log",
			"CREATE TABLE txbench_hot (id INT NOT NULL PRIMARY KEY, v BIGINT NOT NULL)",
			"CREATE TABLE txbench_hot_log (call_id BIGINT NOT NULL PRIMARY KEY)",
			"INSERT INTO txbench_hot (id, v) VALUES (1, 0)",
		)
	}
	if spec.accounts == 0 {
		w.reset = func() []string { return reset }
		return w
	}
	table := "txbench_" + strings.ReplaceAll(spec.name, "-", "_")
	w.acct, w.log = table+"_acct", table+"_log"
	w.xfer = stmts{
		sel: rebind(d, "SELECT balance FROM "+w.acct+" WHERE id = $1"+lock),
		upd: rebind(d, "UPDATE "+w.acct+" SET balance = $1 WHERE id = $2"),
		ins: rebind(d, "INSERT INTO "+w.log+" (call_id, src, dst, amount) VALUES ($1, $2, $3, $4)"),
	}
	reset = append(reset,
		"DROP TABLE IF EXISTS "+w.acct+", "+w.log,
		"CREATE TABLE "+w.acct+" (id INT NOT NULL PRIMARY KEY, balance BIGINT NOT NULL)",
		"CREATE TABLE "+w.log+" (call_id BIGINT NOT NULL PRIMARY KEY, src INT NOT NULL, dst INT NOT NULL, amount BIGINT NOT NULL)",
	)
	w.reset = func() []string {
		out := append(slices.Clip(reset), seedStatements(w.acct, spec.accounts)...)
		if d == dialectPG {
			out = append(out, "ANALYZE "+w.acct)
		}
		return out
	}
	w.rings = make([][]transfer, workers)
	n := spec.accounts
	for i := range w.rings {
		rnd := rand.New(rand.NewPCG(seed, uint64(i)))
		ring := make([]transfer, ringSize)
		hotOnly := spec.split && hotWorker(i, workers, spec.hotPct)
		for j := range ring {
			if hotOnly || !spec.split && spec.hotPct > 0 && rnd.IntN(100) < spec.hotPct {
				ring[j] = transfer{hot: true}
				continue
			}
			src := 1 + rnd.IntN(n)
			dst := 1 + rnd.IntN(n-1)
			if dst >= src {
				dst++
			}
			ring[j] = transfer{src: int64(src), dst: int64(dst), amount: int64(1 + rnd.IntN(100))}
		}
		w.rings[i] = ring
	}
	return w
}

// seedStatements inserts accounts 1..n with initialBalance, seedBatch per
// statement.
func seedStatements(table string, n int) []string {
	var out []string
	for lo := 1; lo <= n; lo += seedBatch {
		var b strings.Builder
		b.WriteString("INSERT INTO " + table + " (id, balance) VALUES ")
		for id := lo; id < lo+seedBatch && id <= n; id++ {
			if id > lo {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "(%d,%d)", id, initialBalance)
		}
		out = append(out, b.String())
	}
	return out
}

// prepare drops and recreates the workload's tables.
func (w *workloadRun) prepare(ctx context.Context, c conn) error {
	for _, q := range w.reset() {
		if err := c.exec(ctx, q); err != nil {
			return fmt.Errorf("reset %s tables: %w", w.spec.name, err)
		}
	}
	return nil
}

// transferOf returns the transfer made by call id, and false if id names no
// worker of this run.
func (w *workloadRun) transferOf(id int64) (transfer, bool) {
	worker := id >> seqBits
	if id < 0 || worker >= int64(len(w.rings)) {
		return transfer{}, false
	}
	return w.rings[worker][(id&(1<<seqBits-1))%ringSize], true
}

// classOf returns the class of call id.
func (w *workloadRun) classOf(id int64) callClass {
	if w.oltp != nil {
		return w.oltp.call(id).kind
	}
	if w.spec.accounts == 0 {
		return classHot
	}
	if t, _ := w.transferOf(id); t.hot {
		return classHot
	}
	return classCold
}

// body returns the transaction of call id.
func (w *workloadRun) body(id int64) txBody {
	if w.oltp != nil {
		return w.oltp.body(id)
	}
	if w.classOf(id) == classHot {
		return func(ctx context.Context, q querier) error {
			v, err := q.queryInt(ctx, w.hot.sel)
			if err != nil {
				return err
			}
			if err := q.exec(ctx, w.hot.upd, v+1); err != nil {
				return err
			}
			return q.exec(ctx, w.hot.ins, id)
		}
	}
	t, _ := w.transferOf(id)
	return func(ctx context.Context, q querier) error {
		from, err := q.queryInt(ctx, w.xfer.sel, t.src)
		if err != nil {
			return err
		}
		to, err := q.queryInt(ctx, w.xfer.sel, t.dst)
		if err != nil {
			return err
		}
		if err := q.exec(ctx, w.xfer.upd, from-t.amount, t.src); err != nil {
			return err
		}
		if err := q.exec(ctx, w.xfer.upd, to+t.amount, t.dst); err != nil {
			return err
		}
		return q.exec(ctx, w.xfer.ins, id, t.src, t.dst, t.amount)
	}
}

// checkResult is the consistency check of one run.
type checkResult struct {
	// lost: calls reported committed that are not in the database.
	lost int
	// unreported: calls in the database that were reported failed (not
	// uncertain).
	unreported int
	// ghosts: calls reported uncertain that did commit (allowed: that is
	// what uncertain means).
	ghosts int
	// problems describes every violation; empty when the check passed.
	problems []string
}

func (r checkResult) ok() bool { return len(r.problems) == 0 }

func (r checkResult) String() string {
	if r.ok() {
		return "ok"
	}
	return "FAIL: " + strings.Join(r.problems, "; ")
}

// check compares the database after a run with what the callers were told:
// the calls logged in the hot row's log and in the transfers' log, together,
// against the calls reported committed and uncertain.
func (w *workloadRun) check(ctx context.Context, c conn, committed, uncertain []int64) (checkResult, error) {
	if w.oltp != nil {
		return w.oltp.check(ctx, c, committed, uncertain)
	}
	var ids []int64
	var problems []string
	if w.spec.hasHot() {
		logged, p, err := w.checkHot(ctx, c)
		if err != nil {
			return checkResult{}, err
		}
		ids, problems = append(ids, logged...), append(problems, p...)
	}
	if w.spec.accounts > 0 {
		logged, p, err := w.checkTransfers(ctx, c)
		if err != nil {
			return checkResult{}, err
		}
		ids, problems = append(ids, logged...), append(problems, p...)
	}
	res := compareIDs(ids, committed, uncertain)
	res.problems = append(res.problems, problems...)
	return res, nil
}

// checkHot returns the calls logged in the hot row's log and the problems
// found: the counter must equal the number of logged calls, and in a mixed
// workload every logged call must be one of its hot calls.
func (w *workloadRun) checkHot(ctx context.Context, c conn) (ids []int64, problems []string, err error) {
	vs, err := c.queryInts(ctx, "SELECT v FROM txbench_hot", 1)
	if err != nil {
		return nil, nil, fmt.Errorf("read counter: %w", err)
	}
	ids, err = c.queryInts(ctx, "SELECT call_id FROM txbench_hot_log", 1)
	if err != nil {
		return nil, nil, fmt.Errorf("read log: %w", err)
	}
	switch {
	case len(vs) != 1:
		problems = append(problems, fmt.Sprintf("%d hot rows, want 1", len(vs)))
	case vs[0] != int64(len(ids)):
		problems = append(problems, fmt.Sprintf("counter %d != %d logged calls", vs[0], len(ids)))
	}
	if w.spec.mixed() {
		var cold int
		for _, id := range ids {
			if t, known := w.transferOf(id); !known || !t.hot {
				cold++
			}
		}
		if cold > 0 {
			problems = append(problems, fmt.Sprintf("%d calls logged on the hot row are not hot calls", cold))
		}
	}
	return ids, problems, nil
}

// checkTransfers returns the calls logged in the transfers' log and the
// problems found: the sum of balances must be unchanged, and every balance
// must equal its initial value plus the logged transfers, whose accounts and
// amounts must match the calls that made them.
func (w *workloadRun) checkTransfers(ctx context.Context, c conn) (ids []int64, problems []string, err error) {
	logs, err := c.queryInts(ctx, "SELECT call_id, src, dst, amount FROM "+w.log, 4)
	if err != nil {
		return nil, nil, fmt.Errorf("read log: %w", err)
	}
	bal, err := c.queryInts(ctx, "SELECT id, balance FROM "+w.acct+" ORDER BY id", 2)
	if err != nil {
		return nil, nil, fmt.Errorf("read balances: %w", err)
	}
	n := w.spec.accounts
	ids = make([]int64, 0, len(logs)/4)
	want := make([]int64, n+1)
	for i := range want {
		want[i] = initialBalance
	}
	var mismatched int
	for i := 0; i+3 < len(logs); i += 4 {
		id, src, dst, amount := logs[i], logs[i+1], logs[i+2], logs[i+3]
		ids = append(ids, id)
		t, known := w.transferOf(id)
		if !known || t != (transfer{src: src, dst: dst, amount: amount}) || src < 1 || src > int64(n) || dst < 1 || dst > int64(n) {
			mismatched++
			continue
		}
		want[src] -= amount
		want[dst] += amount
	}
	if mismatched > 0 {
		problems = append(problems, fmt.Sprintf("%d logged transfers differ from the calls' transfers", mismatched))
	}
	if len(bal) != 2*n {
		problems = append(problems, fmt.Sprintf("%d accounts, want %d", len(bal)/2, n))
		return ids, problems, nil
	}
	var sum int64
	var wrong int
	for i := 0; i < len(bal); i += 2 {
		id, b := bal[i], bal[i+1]
		sum += b
		if id < 1 || id > int64(n) || b != want[id] {
			wrong++
		}
	}
	if total := int64(n) * initialBalance; sum != total {
		problems = append(problems, fmt.Sprintf("sum of balances %d != %d", sum, total))
	}
	if wrong > 0 {
		problems = append(problems, fmt.Sprintf("%d balances differ from the logged transfers", wrong))
	}
	return ids, problems, nil
}

// compareIDs compares the call ids found in the database with the calls
// reported committed and the calls reported uncertain.
func compareIDs(db, committed, uncertain []int64) checkResult {
	var res checkResult
	in := make(map[int64]struct{}, len(db))
	for _, id := range db {
		in[id] = struct{}{}
	}
	told := make(map[int64]bool, len(committed)+len(uncertain)) // true: committed
	for _, id := range uncertain {
		told[id] = false
	}
	for _, id := range committed {
		told[id] = true
		if _, ok := in[id]; !ok {
			res.lost++
		}
	}
	for _, id := range db {
		c, reported := told[id]
		switch {
		case !reported:
			res.unreported++
		case !c:
			res.ghosts++
		}
	}
	if res.lost > 0 {
		res.problems = append(res.problems, strconv.Itoa(res.lost)+" calls reported committed are missing")
	}
	if res.unreported > 0 {
		res.problems = append(res.problems, strconv.Itoa(res.unreported)+" calls reported failed are committed")
	}
	return res
}
