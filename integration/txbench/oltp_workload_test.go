package main

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/txretry"
)

func workloadNamed(t *testing.T, name string) workloadSpec {
	t.Helper()
	ws, ok := find(allWorkloads, func(w workloadSpec) bool { return w.name == name })
	if !ok {
		t.Fatalf("no workload %s", name)
	}
	return ws
}

// The oltp mix draws each call's kind from its id and the seed in TPC-C's
// proportions (45/43/4/4/4), the same on every driver; New-Order has 5..15
// distinct items.
func TestOLTPMix(t *testing.T) {
	ws := workloadNamed(t, "oltp")
	pg := newWorkloadRun(ws, allDrivers[0], 32, 7)
	my := newWorkloadRun(ws, allDrivers[1], 32, 7)
	var count [nClasses]int
	const calls = 10_000
	for i := range calls {
		id := callID(i%32, i/32)
		a, b := pg.oltp.call(id), my.oltp.call(id)
		if a.kind != b.kind || a.district != b.district || a.customer != b.customer || !slices.Equal(a.items, b.items) {
			t.Fatalf("call %d differs between drivers: %+v %+v", id, a, b)
		}
		count[a.kind]++
		if a.district < 1 || a.district > oltpDistricts || a.customer < 1 || a.customer > oltpCustomers {
			t.Fatalf("call %d: district %d customer %d", id, a.district, a.customer)
		}
		if a.kind == classNewOrder {
			seen := map[int64]bool{}
			for _, it := range a.items {
				if seen[it.item] || it.item < 1 || it.item > oltpItems || it.qty < 1 || it.qty > 10 {
					t.Fatalf("call %d: items %v", id, a.items)
				}
				seen[it.item] = true
			}
			if len(a.items) < 5 || len(a.items) > 15 {
				t.Fatalf("call %d: %d items", id, len(a.items))
			}
		}
	}
	for cl, want := range map[callClass]float64{classNewOrder: 45, classPayment: 43, classOrderStatus: 4, classDelivery: 4, classStockLevel: 4} {
		// Within five standard deviations of the binomial count.
		tol := 5 * 100 * math.Sqrt(want/100*(1-want/100)/calls)
		if got := 100 * float64(count[cl]) / calls; math.Abs(got-want) > tol {
			t.Errorf("%s: %.1f%% of the calls, want %.0f%%", classNames[cl], got, want)
		}
	}
	if count[classHot]+count[classCold] != 0 {
		t.Errorf("oltp calls of the hot or cold class: %v", count)
	}
	if !ws.labels || !ws.methodValues || ws.hasHot() || !slices.Equal(ws.classes(), []callClass{classNewOrder, classPayment, classOrderStatus, classDelivery, classStockLevel}) {
		t.Errorf("oltp spec %+v, classes %v", ws, ws.classes())
	}
	if mv := workloadNamed(t, "oltp-mv"); mv.labels || !mv.methodValues || !mv.oltp {
		t.Errorf("oltp-mv spec %+v", mv)
	}
}

// labelLog records the label of every txretry call, by call.
type labelLog struct {
	mu     sync.Mutex
	labels []string
}

func (l *labelLog) observe(_ context.Context, e txretry.Event) {
	if e.Kind == txretry.CallFinished {
		l.mu.Lock()
		l.labels = append(l.labels, e.Label)
		l.mu.Unlock()
	}
}

// On each database, every kind of oltp transaction commits through txretry
// with its kind's label, one after the other (New-Orders first, so that
// Delivery and Order-Status find orders); then 4 workers run the mix
// concurrently for 300 ms; the consistency check passes over all the calls,
// and fails once a district's year-to-date or a payment is tampered with.
func TestOLTPTransactionsOnEachDatabase(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ws := workloadNamed(t, "oltp")
	for _, ds := range allDrivers[:2] {
		t.Run(ds.name, func(t *testing.T) {
			var dsn string
			if ds.dialect == dialectMySQL {
				dsn = dbservertest.MySQL(t)
			} else {
				dsn = dbservertest.Postgres(t)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			const workers = 4
			c, err := ds.open(ctx, dsn, workers)
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			wl := newWorkloadRun(ws, ds, workers, 1)
			useIsolation(c, wl)
			if want := map[dialect]string{dialectPG: "Serializable", dialectMySQL: "Repeatable Read"}[ds.dialect]; c.isolation().String() != want {
				t.Errorf("isolation %s, want %s", c.isolation(), want)
			}
			if err := wl.prepare(ctx, c); err != nil {
				t.Fatal(err)
			}

			// One after the other: three New-Orders, then one call of every
			// other kind, all by worker 0's stream.
			var order []int64
			var newOrders int
			pending := map[callClass]int64{}
			for seq := 0; len(order) < 7; seq++ {
				id := callID(0, seq)
				switch k := wl.classOf(id); {
				case k == classNewOrder && newOrders < 3:
					newOrders++
					order = append(order, id)
				case k != classNewOrder:
					if _, ok := pending[k]; !ok {
						pending[k] = id
					}
				}
				if newOrders == 3 && len(pending) == 4 {
					for _, k := range []callClass{classPayment, classOrderStatus, classDelivery, classStockLevel} {
						order = append(order, pending[k])
					}
				}
			}
			labels := &labelLog{}
			tx := &runner{name: "txretry", kind: kindTxretry}
			w := newWorker(0, c, wl, tx, []txretry.Option{txretry.WithObserver(txretry.ObserverFunc(labels.observe))}, 1)
			far := time.Now().Add(time.Hour)
			for _, id := range order {
				w.run(ctx, id, time.Now(), far, time.Minute)
			}
			for _, k := range ws.classes() {
				if cs := w.st.classes[k]; cs.Commits == 0 {
					t.Errorf("%s: %d calls, none committed (%s)", classNames[k], cs.Calls, w.st.otherSample)
				}
			}
			var wantLabels []string
			for _, id := range order {
				wantLabels = append(wantLabels, classNames[wl.classOf(id)])
			}
			if !slices.Equal(labels.labels, wantLabels) {
				t.Errorf("labels %v, want %v", labels.labels, wantLabels)
			}
			if got, err := c.queryInts(ctx, "SELECT dl_delivered FROM "+oltpPrefix+"delivery", 1); err != nil || len(got) != 1 || got[0] < 1 {
				t.Errorf("the delivery delivered %v (%v), want at least one order", got, err)
			}

			// Concurrently, on the same tables, from the other streams.
			st, err := runWorkers(ctx, c, wl, tx, 1, workers-1, 1, 300*time.Millisecond, 10*time.Second, openLoop{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if st.calls == 0 || st.other > 0 {
				t.Errorf("concurrent run: %d calls, %d other errors (%s)", st.calls, st.other, st.otherSample)
			}
			committed := append(slices.Clone(w.st.committedIDs), st.committedIDs...)
			res, err := wl.check(ctx, c, committed, st.uncertainIDs)
			if err != nil {
				t.Fatal(err)
			}
			if !res.ok() {
				t.Fatalf("check: %s", res)
			}

			for _, tamper := range []struct{ stmt, problem string }{
				{"UPDATE " + oltpPrefix + "district SET d_ytd = d_ytd + 1 WHERE d_id = 1", "warehouse ytd"},
				{"DELETE FROM " + oltpPrefix + "history", "reported committed are missing"},
			} {
				if err := c.exec(ctx, tamper.stmt); err != nil {
					t.Fatal(err)
				}
				res, err := wl.check(ctx, c, committed, st.uncertainIDs)
				if err != nil || !strings.Contains(res.String(), tamper.problem) {
					t.Errorf("after %q: check %s (%v), want %q", tamper.stmt, res, err, tamper.problem)
				}
			}
		})
	}
}

// The oltp table has a row per kind of transaction (goodput, failed calls
// by reason, attempts per commit, p50, p99), "-" for a kind without calls,
// and no hot or cold row; the TSV has every kind's columns.
func TestOLTPReportHasARowPerKind(t *testing.T) {
	r := fakeRun("txretry", 1, 100, nil)
	r.workload = "oltp-mv"
	r.st.classes[classNewOrder] = classStats{Calls: 50, InDeadline: 40, Failed: 10, Deadline: 10, Attempts: 120, Commits: 40}
	r.st.classes[classPayment] = classStats{Calls: 60, InDeadline: 60, Attempts: 60, Commits: 60}
	r.classP50[classNewOrder], r.classP99[classNewOrder] = 30*time.Millisecond, 700*time.Millisecond
	sums := summarize([]runResult{r}, []string{"txretry"}, "txretry")
	var buf bytes.Buffer
	cfg := &config{workers: 32, duration: 10 * time.Second, deadline: time.Second, repeat: 1}
	if err := writeTable(&buf, cfg, sums, "txretry"); err != nil {
		t.Fatal(err)
	}
	table := buf.String()
	for _, re := range []string{
		` +txretry +1 +32 +new-order +4 +20\.0 +0\.0 +20\.0 +0\.0 +0\.0 +3\.00 +30\.0 +700 `,
		` +txretry +1 +32 +payment +6 +0\.0 +0\.0 +0\.0 +0\.0 +0\.0 +1\.00 `,
		` +txretry +1 +32 +order-status +- +- `, ` +txretry +1 +32 +delivery +- `, ` +txretry +1 +32 +stock-level +- `,
	} {
		if !matchLine(table, re) {
			t.Errorf("no line matching %q:\n%s", re, table)
		}
	}
	if matchLine(table, ` +txretry +1 +32 +(hot|cold) `) {
		t.Errorf("oltp table with a hot or cold row:\n%s", table)
	}
	head := tsvRows(sums)[0]
	for _, cl := range []string{"new_order", "payment", "order_status", "delivery", "stock_level"} {
		for _, m := range []string{"goodput_tps", "fail_pct", "deadline_pct", "attempts_per_commit", "p50_ms", "p99_ms"} {
			if !slices.Contains(head, cl+"_"+m) {
				t.Errorf("TSV lacks %s_%s", cl, m)
			}
		}
	}
}
