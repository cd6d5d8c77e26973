package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
)

// The oltp workloads: a TPC-C-like mix (written for txbench, after the TPC-C
// specification's transaction profiles) over one warehouse. New-Order and
// Payment, 88% of the calls, both write their district's row, and every
// Payment writes the warehouse's row.
const (
	oltpDistricts = 10
	oltpCustomers = 300 // per district
	oltpItems     = 10_000
	// oltpRecent is the number of a district's latest orders whose lines
	// Stock-Level examines.
	oltpRecent = 20

	// Initial values, in cents: the warehouse's year-to-date equals the
	// sum of its districts'.
	oltpDistrictYTD  = 3_000_000
	oltpWarehouseYTD = oltpDistricts * oltpDistrictYTD
	oltpBalance      = -1_000
	oltpYTDPayment   = 1_000
)

// oltpPrefix starts the oltp tables' names.
const oltpPrefix = "txbench_oltp_"

// errOLTPMissing is returned by a transaction that does not find a row
// seeded before the run, and errOLTPAnomaly by one that finds the database
// in a state that serializable execution cannot produce.
var (
	errOLTPMissing = errors.New("oltp: seeded row missing")
	errOLTPAnomaly = errors.New("oltp: anomaly")
)

// oltpItem is one line of a New-Order call.
type oltpItem struct{ item, qty int64 }

// oltpCall is the input of one oltp call, a function of the run's seed and
// the call's id.
type oltpCall struct {
	kind      callClass
	district  int64      // all but Delivery
	customer  int64      // New-Order, Payment, Order-Status
	items     []oltpItem // New-Order: 5..15 distinct items
	amount    int64      // Payment: 1.00..5,000.00, in cents
	carrier   int64      // Delivery: 1..10
	threshold int64      // Stock-Level: 10..20
}

// oltpRun is the oltp workload prepared for one run on one dialect.
type oltpRun struct {
	seed uint64
	q    oltpSQL
}

// oltpSQL holds the statements of the oltp transactions and of their check.
type oltpSQL struct {
	whTax, whYTD                                   string
	distForNext, distNext, distYTD, distTax, distN string
	custDisc, custBal, custBalRead, custPay        string
	custDeliver                                    string
	itemPrice, stockQty, stockUpd, stockLow        string
	orderIns, newOrderIns, lineIns, histIns        string
	lastOrder, orderLines                          string
	oldestNO, noDel, orderCust, orderCarrier       string
	lineDeliver, lineSum, deliveryIns              string
	sum                                            func(expr string) string // the integer sum of expr, 0 over no rows
}

func newOLTPRun(ds driverSpec, seed uint64) *oltpRun {
	d := ds.dialect
	// PostgreSQL runs SERIALIZABLE; MySQL, MariaDB and TiDB REPEATABLE READ
	// with SELECT … FOR UPDATE where the transaction writes what it read.
	lock := ""
	if d == dialectMySQL {
		lock = " FOR UPDATE"
	}
	t := func(name string) string { return oltpPrefix + name }
	r := func(q string) string { return rebind(d, q) }
	q := oltpSQL{
		whTax:       "SELECT w_tax FROM " + t("warehouse") + " WHERE w_id = 1",
		whYTD:       r("UPDATE " + t("warehouse") + " SET w_ytd = w_ytd + $1 WHERE w_id = 1"),
		distForNext: r("SELECT d_next_o_id, d_tax FROM " + t("district") + " WHERE d_w_id = 1 AND d_id = $1" + lock),
		distNext:    r("UPDATE " + t("district") + " SET d_next_o_id = $1 WHERE d_w_id = 1 AND d_id = $2"),
		distYTD:     r("UPDATE " + t("district") + " SET d_ytd = d_ytd + $1 WHERE d_w_id = 1 AND d_id = $2"),
		distTax:     r("SELECT d_tax FROM " + t("district") + " WHERE d_w_id = 1 AND d_id = $1"),
		distN:       r("SELECT d_next_o_id FROM " + t("district") + " WHERE d_w_id = 1 AND d_id = $1"),
		custDisc:    r("SELECT c_discount FROM " + t("customer") + " WHERE c_w_id = 1 AND c_d_id = $1 AND c_id = $2"),
		custBal:     r("SELECT c_balance FROM " + t("customer") + " WHERE c_w_id = 1 AND c_d_id = $1 AND c_id = $2" + lock),
		custBalRead: r("SELECT c_balance FROM " + t("customer") + " WHERE c_w_id = 1 AND c_d_id = $1 AND c_id = $2"),
		custPay: r("UPDATE " + t("customer") + " SET c_balance = $1, c_ytd_payment = c_ytd_payment + $2, c_payment_cnt = c_payment_cnt + 1" +
			" WHERE c_w_id = 1 AND c_d_id = $3 AND c_id = $4"),
		custDeliver: r("UPDATE " + t("customer") + " SET c_balance = c_balance + $1, c_delivery_cnt = c_delivery_cnt + 1" +
			" WHERE c_w_id = 1 AND c_d_id = $2 AND c_id = $3"),
		itemPrice: r("SELECT i_price FROM " + t("item") + " WHERE i_id = $1"),
		stockQty:  r("SELECT s_quantity FROM " + t("stock") + " WHERE s_w_id = 1 AND s_i_id = $1" + lock),
		stockUpd: r("UPDATE " + t("stock") + " SET s_quantity = $1, s_ytd = s_ytd + $2, s_order_cnt = s_order_cnt + 1" +
			" WHERE s_w_id = 1 AND s_i_id = $3"),
		stockLow: r("SELECT COUNT(DISTINCT s.s_i_id) FROM " + t("order_line") + " ol JOIN " + t("stock") +
			" s ON s.s_w_id = ol.ol_w_id AND s.s_i_id = ol.ol_i_id" +
			" WHERE ol.ol_w_id = 1 AND ol.ol_d_id = $1 AND ol.ol_o_id >= $2 AND ol.ol_o_id < $3 AND s.s_quantity < $4"),
		orderIns: r("INSERT INTO " + t("orders") + " (o_w_id, o_d_id, o_id, o_c_id, o_carrier_id, o_ol_cnt, o_call_id)" +
			" VALUES (1, $1, $2, $3, 0, $4, $5)"),
		newOrderIns: r("INSERT INTO " + t("new_order") + " (no_w_id, no_d_id, no_o_id) VALUES (1, $1, $2)"),
		lineIns: r("INSERT INTO " + t("order_line") + " (ol_w_id, ol_d_id, ol_o_id, ol_number, ol_i_id, ol_quantity, ol_amount, ol_delivery_d)" +
			" VALUES (1, $1, $2, $3, $4, $5, $6, 0)"),
		histIns: r("INSERT INTO " + t("history") + " (h_call_id, h_c_d_id, h_c_id, h_d_id, h_w_id, h_amount)" +
			" VALUES ($1, $2, $3, $4, 1, $5)"),
		lastOrder: r("SELECT o_id, o_carrier_id FROM " + t("orders") +
			" WHERE o_w_id = 1 AND o_d_id = $1 AND o_c_id = $2 ORDER BY o_id DESC LIMIT 1"),
		orderLines: r("SELECT ol_i_id, ol_quantity, ol_amount, ol_delivery_d FROM " + t("order_line") +
			" WHERE ol_w_id = 1 AND ol_d_id = $1 AND ol_o_id = $2"),
		oldestNO:     r("SELECT no_o_id FROM " + t("new_order") + " WHERE no_w_id = 1 AND no_d_id = $1 ORDER BY no_o_id LIMIT 1" + lock),
		noDel:        r("DELETE FROM " + t("new_order") + " WHERE no_w_id = 1 AND no_d_id = $1 AND no_o_id = $2"),
		orderCust:    r("SELECT o_c_id FROM " + t("orders") + " WHERE o_w_id = 1 AND o_d_id = $1 AND o_id = $2" + lock),
		orderCarrier: r("UPDATE " + t("orders") + " SET o_carrier_id = $1 WHERE o_w_id = 1 AND o_d_id = $2 AND o_id = $3"),
		lineDeliver:  r("UPDATE " + t("order_line") + " SET ol_delivery_d = $1 WHERE ol_w_id = 1 AND ol_d_id = $2 AND ol_o_id = $3"),
		deliveryIns:  r("INSERT INTO " + t("delivery") + " (dl_call_id, dl_carrier_id, dl_delivered) VALUES ($1, $2, $3)"),
	}
	q.sum = func(expr string) string {
		if d == dialectMySQL {
			return "CAST(COALESCE(SUM(" + expr + "), 0) AS SIGNED)"
		}
		return "CAST(COALESCE(SUM(" + expr + "), 0) AS BIGINT)"
	}
	q.lineSum = r("SELECT " + q.sum("ol_amount") + " FROM " + t("order_line") + " WHERE ol_w_id = 1 AND ol_d_id = $1 AND ol_o_id = $2")
	return &oltpRun{seed: seed, q: q}
}

// oltpTables are the oltp tables, without their prefix.
var oltpTables = []string{"warehouse", "district", "customer", "item", "stock", "orders", "new_order", "order_line", "history", "delivery"}

// oltpSchema returns the statements that recreate and seed the oltp tables.
func oltpSchema(d dialect, seed uint64) []string {
	t := func(name string) string { return oltpPrefix + name }
	drop := make([]string, len(oltpTables))
	for i, n := range oltpTables {
		drop[i] = t(n)
	}
	out := []string{
		"DROP TABLE IF EXISTS " + strings.Join(drop, ", "),
		"CREATE TABLE " + t("warehouse") + " (w_id INT NOT NULL PRIMARY KEY, w_tax INT NOT NULL, w_ytd BIGINT NOT NULL)",
		"CREATE TABLE " + t("district") + " (d_w_id INT NOT NULL, d_id INT NOT NULL, d_tax INT NOT NULL, d_ytd BIGINT NOT NULL," +
			" d_next_o_id INT NOT NULL, PRIMARY KEY (d_w_id, d_id))",
		"CREATE TABLE " + t("customer") + " (c_w_id INT NOT NULL, c_d_id INT NOT NULL, c_id INT NOT NULL, c_discount INT NOT NULL," +
			" c_balance BIGINT NOT NULL, c_ytd_payment BIGINT NOT NULL, c_payment_cnt INT NOT NULL, c_delivery_cnt INT NOT NULL," +
			" PRIMARY KEY (c_w_id, c_d_id, c_id))",
		"CREATE TABLE " + t("item") + " (i_id INT NOT NULL PRIMARY KEY, i_price INT NOT NULL)",
		"CREATE TABLE " + t("stock") + " (s_w_id INT NOT NULL, s_i_id INT NOT NULL, s_quantity INT NOT NULL, s_ytd BIGINT NOT NULL," +
			" s_order_cnt INT NOT NULL, PRIMARY KEY (s_w_id, s_i_id))",
		"CREATE TABLE " + t("orders") + " (o_w_id INT NOT NULL, o_d_id INT NOT NULL, o_id INT NOT NULL, o_c_id INT NOT NULL," +
			" o_carrier_id INT NOT NULL, o_ol_cnt INT NOT NULL, o_call_id BIGINT NOT NULL UNIQUE, PRIMARY KEY (o_w_id, o_d_id, o_id))",
		"CREATE INDEX " + t("orders_customer") + " ON " + t("orders") + " (o_w_id, o_d_id, o_c_id, o_id)",
		"CREATE TABLE " + t("new_order") + " (no_w_id INT NOT NULL, no_d_id INT NOT NULL, no_o_id INT NOT NULL," +
			" PRIMARY KEY (no_w_id, no_d_id, no_o_id))",
		// ol_delivery_d, TPC-C's delivery date, holds the delivering
		// call's id plus one: 0 until delivered.
		"CREATE TABLE " + t("order_line") + " (ol_w_id INT NOT NULL, ol_d_id INT NOT NULL, ol_o_id INT NOT NULL, ol_number INT NOT NULL," +
			" ol_i_id INT NOT NULL, ol_quantity INT NOT NULL, ol_amount BIGINT NOT NULL, ol_delivery_d BIGINT NOT NULL," +
			" PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number))",
		"CREATE TABLE " + t("history") + " (h_call_id BIGINT NOT NULL PRIMARY KEY, h_c_d_id INT NOT NULL, h_c_id INT NOT NULL," +
			" h_d_id INT NOT NULL, h_w_id INT NOT NULL, h_amount BIGINT NOT NULL)",
		"CREATE TABLE " + t("delivery") + " (dl_call_id BIGINT NOT NULL PRIMARY KEY, dl_carrier_id INT NOT NULL, dl_delivered INT NOT NULL)",
	}
	rnd := rand.New(rand.NewPCG(seed, 1<<62))
	out = append(out, fmt.Sprintf("INSERT INTO %s (w_id, w_tax, w_ytd) VALUES (1, %d, %d)", t("warehouse"), rnd.IntN(2001), oltpWarehouseYTD))
	var b strings.Builder
	b.WriteString("INSERT INTO " + t("district") + " (d_w_id, d_id, d_tax, d_ytd, d_next_o_id) VALUES ")
	for dist := 1; dist <= oltpDistricts; dist++ {
		if dist > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "(1,%d,%d,%d,1)", dist, rnd.IntN(2001), oltpDistrictYTD)
	}
	out = append(out, b.String())
	out = append(out, batchInsert(t("customer")+" (c_w_id, c_d_id, c_id, c_discount, c_balance, c_ytd_payment, c_payment_cnt, c_delivery_cnt)",
		oltpDistricts*oltpCustomers, func(i int) string {
			return fmt.Sprintf("(1,%d,%d,%d,%d,%d,0,0)", 1+i/oltpCustomers, 1+i%oltpCustomers, rnd.IntN(5001), oltpBalance, oltpYTDPayment)
		})...)
	out = append(out, batchInsert(t("item")+" (i_id, i_price)", oltpItems, func(i int) string {
		return fmt.Sprintf("(%d,%d)", i+1, 100+rnd.IntN(9901))
	})...)
	out = append(out, batchInsert(t("stock")+" (s_w_id, s_i_id, s_quantity, s_ytd, s_order_cnt)", oltpItems, func(i int) string {
		return fmt.Sprintf("(1,%d,%d,0,0)", i+1, 10+rnd.IntN(91))
	})...)
	if d == dialectPG {
		for _, n := range oltpTables {
			out = append(out, "ANALYZE "+t(n))
		}
	}
	return out
}

// batchInsert returns the statements that insert n rows into table (with its
// column list), seedBatch rows per statement, row i rendered by row.
func batchInsert(table string, n int, row func(i int) string) []string {
	var out []string
	for lo := 0; lo < n; lo += seedBatch {
		var b strings.Builder
		b.WriteString("INSERT INTO " + table + " VALUES ")
		for i := lo; i < lo+seedBatch && i < n; i++ {
			if i > lo {
				b.WriteByte(',')
			}
			b.WriteString(row(i))
		}
		out = append(out, b.String())
	}
	return out
}

// nuRand is TPC-C's non-uniform random number in [x, y] (clause 2.1.6).
func nuRand(rnd *rand.Rand, a, c, x, y int) int64 {
	return int64(((rnd.IntN(a+1)|(x+rnd.IntN(y-x+1)))+c)%(y-x+1) + x)
}

// call returns the input of call id: its kind (New-Order 45%, Payment 43%,
// Order-Status, Delivery and Stock-Level 4% each) and parameters, the same
// for every runner and driver of a repeat.
func (o *oltpRun) call(id int64) oltpCall {
	rnd := rand.New(rand.NewPCG(o.seed, uint64(id)))
	c := oltpCall{
		district: 1 + int64(rnd.IntN(oltpDistricts)),
		customer: nuRand(rnd, 255, 123, 1, oltpCustomers),
	}
	switch k := rnd.IntN(100); {
	case k < 45:
		c.kind = classNewOrder
		n := 5 + rnd.IntN(11)
		c.items = make([]oltpItem, 0, n)
		for len(c.items) < n {
			it := nuRand(rnd, 8191, 7911, 1, oltpItems)
			dup := false
			for _, x := range c.items {
				dup = dup || x.item == it
			}
			if !dup {
				c.items = append(c.items, oltpItem{item: it, qty: 1 + int64(rnd.IntN(10))})
			}
		}
	case k < 88:
		c.kind = classPayment
		c.amount = 100 + int64(rnd.IntN(499_901))
	case k < 92:
		c.kind = classOrderStatus
	case k < 96:
		c.kind = classDelivery
		c.carrier = 1 + int64(rnd.IntN(10))
	default:
		c.kind = classStockLevel
		c.threshold = 10 + int64(rnd.IntN(11))
	}
	return c
}

// body returns the transaction of call id.
func (o *oltpRun) body(id int64) txBody {
	c := o.call(id)
	s := &o.q
	switch c.kind {
	case classNewOrder:
		return func(ctx context.Context, q querier) error { return s.newOrder(ctx, q, id, &c) }
	case classPayment:
		return func(ctx context.Context, q querier) error { return s.payment(ctx, q, id, &c) }
	case classOrderStatus:
		return func(ctx context.Context, q querier) error { return s.orderStatus(ctx, q, &c) }
	case classDelivery:
		return func(ctx context.Context, q querier) error { return s.delivery(ctx, q, id, &c) }
	}
	return func(ctx context.Context, q querier) error { return s.stockLevel(ctx, q, &c) }
}

// newOrder reads the warehouse's tax, takes the district's next order id
// and increments it, reads the customer's discount, inserts the order, its
// new-order row and its lines, and updates the stock of each item.
func (s *oltpSQL) newOrder(ctx context.Context, q querier, id int64, c *oltpCall) error {
	if _, err := q.queryInt(ctx, s.whTax); err != nil {
		return err
	}
	dist, err := q.queryInts(ctx, s.distForNext, 2, c.district)
	if err != nil {
		return err
	}
	if len(dist) != 2 {
		return fmt.Errorf("%w: district %d", errOLTPMissing, c.district)
	}
	next := dist[0]
	if err := q.exec(ctx, s.distNext, next+1, c.district); err != nil {
		return err
	}
	if _, err := q.queryInt(ctx, s.custDisc, c.district, c.customer); err != nil {
		return err
	}
	if err := q.exec(ctx, s.orderIns, c.district, next, c.customer, int64(len(c.items)), id); err != nil {
		return err
	}
	if err := q.exec(ctx, s.newOrderIns, c.district, next); err != nil {
		return err
	}
	for n, it := range c.items {
		price, err := q.queryInt(ctx, s.itemPrice, it.item)
		if err != nil {
			return err
		}
		qty, err := q.queryInt(ctx, s.stockQty, it.item)
		if err != nil {
			return err
		}
		if qty -= it.qty; qty < 10 {
			qty += 91
		}
		if err := q.exec(ctx, s.stockUpd, qty, it.qty, it.item); err != nil {
			return err
		}
		if err := q.exec(ctx, s.lineIns, c.district, next, int64(n+1), it.item, it.qty, it.qty*price); err != nil {
			return err
		}
	}
	return nil
}

// payment adds the amount to the warehouse's and the district's
// year-to-date (reading each after), takes it from the customer's balance
// and logs it in the history.
func (s *oltpSQL) payment(ctx context.Context, q querier, id int64, c *oltpCall) error {
	if err := q.exec(ctx, s.whYTD, c.amount); err != nil {
		return err
	}
	if _, err := q.queryInt(ctx, s.whTax); err != nil {
		return err
	}
	if err := q.exec(ctx, s.distYTD, c.amount, c.district); err != nil {
		return err
	}
	if _, err := q.queryInt(ctx, s.distTax, c.district); err != nil {
		return err
	}
	bal, err := q.queryInt(ctx, s.custBal, c.district, c.customer)
	if err != nil {
		return err
	}
	if err := q.exec(ctx, s.custPay, bal-c.amount, c.amount, c.district, c.customer); err != nil {
		return err
	}
	return q.exec(ctx, s.histIns, id, c.district, c.customer, c.district, c.amount)
}

// orderStatus reads the customer's balance, last order and its lines.
func (s *oltpSQL) orderStatus(ctx context.Context, q querier, c *oltpCall) error {
	if _, err := q.queryInt(ctx, s.custBalRead, c.district, c.customer); err != nil {
		return err
	}
	last, err := q.queryInts(ctx, s.lastOrder, 2, c.district, c.customer)
	if err != nil || len(last) == 0 {
		return err
	}
	_, err = q.queryInts(ctx, s.orderLines, 4, c.district, last[0])
	return err
}

// delivery delivers, in each district, the oldest order not yet delivered:
// deletes its new-order row, sets its carrier, stamps its lines and adds
// their amount to the customer's balance; then logs the call.
func (s *oltpSQL) delivery(ctx context.Context, q querier, id int64, c *oltpCall) error {
	delivered := int64(0)
	for d := int64(1); d <= oltpDistricts; d++ {
		oldest, err := q.queryInts(ctx, s.oldestNO, 1, d)
		if err != nil {
			return err
		}
		if len(oldest) == 0 {
			continue
		}
		o := oldest[0]
		n, err := q.execCount(ctx, s.noDel, d, o)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%w: deleted %d new-order rows of one order", errOLTPAnomaly, n)
		}
		cust, err := q.queryInt(ctx, s.orderCust, d, o)
		if err != nil {
			return err
		}
		if err := q.exec(ctx, s.orderCarrier, c.carrier, d, o); err != nil {
			return err
		}
		if err := q.exec(ctx, s.lineDeliver, id+1, d, o); err != nil {
			return err
		}
		amount, err := q.queryInt(ctx, s.lineSum, d, o)
		if err != nil {
			return err
		}
		if err := q.exec(ctx, s.custDeliver, amount, d, cust); err != nil {
			return err
		}
		delivered++
	}
	return q.exec(ctx, s.deliveryIns, id, c.carrier, delivered)
}

// stockLevel counts the items of the district's latest orders whose stock
// is below the threshold.
func (s *oltpSQL) stockLevel(ctx context.Context, q querier, c *oltpCall) error {
	next, err := q.queryInt(ctx, s.distN, c.district)
	if err != nil {
		return err
	}
	_, err = q.queryInt(ctx, s.stockLow, c.district, next-oltpRecent, next, c.threshold)
	return err
}

// writes reports whether calls of kind k leave their id in the database.
func writes(k callClass) bool {
	return k == classNewOrder || k == classPayment || k == classDelivery
}

// check compares the database after a run with what the callers were told
// and with TPC-C's consistency conditions: every district's next order id
// follows its orders; the warehouse's year-to-date equals its districts' sum
// and its initial value plus the payments; the customers' balances and
// counters follow the payments and deliveries; orders, new-order rows and
// lines agree on what was delivered; the stock follows the lines; every
// logged call is a call of its kind with its inputs. Order-Status and
// Stock-Level calls write nothing, so only the other kinds' ids are
// compared.
func (o *oltpRun) check(ctx context.Context, c conn, committed, uncertain []int64) (checkResult, error) {
	t := func(name string) string { return oltpPrefix + name }
	sum := o.q.sum
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	queries := []struct {
		q    string
		ncol int
	}{
		{"SELECT d_id, d_next_o_id, d_ytd FROM " + t("district") + " ORDER BY d_id", 3},
		{"SELECT o_d_id, COUNT(*), MAX(o_id) FROM " + t("orders") + " GROUP BY o_d_id", 3},
		{"SELECT w_ytd FROM " + t("warehouse"), 1},
		{"SELECT h_call_id, h_d_id, h_c_d_id, h_c_id, h_amount FROM " + t("history"), 5},
		{"SELECT o_call_id, o_d_id, o_c_id, o_ol_cnt, o_carrier_id FROM " + t("orders"), 5},
		{"SELECT dl_call_id, dl_carrier_id, dl_delivered FROM " + t("delivery"), 3},
		{"SELECT " + sum("c_balance") + ", " + sum("c_ytd_payment") + ", " + sum("c_payment_cnt") + ", " + sum("c_delivery_cnt") + " FROM " + t("customer"), 4},
		{"SELECT COUNT(*), " + sum("ol_quantity") + ", " + sum("CASE WHEN ol_delivery_d <> 0 THEN ol_amount ELSE 0 END") + " FROM " + t("order_line"), 3},
		{"SELECT " + sum("s_ytd") + ", " + sum("s_order_cnt") + " FROM " + t("stock"), 2},
		{"SELECT COUNT(*), " + sum("CASE WHEN (o.o_carrier_id = 0) <> (ol.ol_delivery_d = 0) THEN 1 ELSE 0 END") + " FROM " + t("order_line") +
			" ol JOIN " + t("orders") + " o ON o.o_w_id = ol.ol_w_id AND o.o_d_id = ol.ol_d_id AND o.o_id = ol.ol_o_id", 2},
		{"SELECT COUNT(*), " + sum("CASE WHEN o.o_carrier_id = 0 THEN 1 ELSE 0 END") + " FROM " + t("new_order") +
			" n JOIN " + t("orders") + " o ON o.o_w_id = n.no_w_id AND o.o_d_id = n.no_d_id AND o.o_id = n.no_o_id", 2},
		{"SELECT COUNT(*) FROM " + t("new_order"), 1},
	}
	res := make([][]int64, len(queries))
	for i, qq := range queries {
		var err error
		if res[i], err = c.queryInts(ctx, qq.q, qq.ncol); err != nil {
			return checkResult{}, fmt.Errorf("oltp check query %d: %w", i+1, err)
		}
	}
	dist, perDist, wh, hist, orders, dlog, cust, lines, stock, joined, noJoined, noCount :=
		res[0], res[1], res[2], res[3], res[4], res[5], res[6], res[7], res[8], res[9], res[10], res[11]
	if len(dist) != 3*oltpDistricts || len(wh) != 1 || len(cust) != 4 || len(lines) != 3 || len(stock) != 2 ||
		len(joined) != 2 || len(noJoined) != 2 || len(noCount) != 1 {
		fail("seeded or aggregate rows missing")
		return checkResult{problems: problems}, nil
	}

	// Districts: next order id, orders and year-to-date.
	var distYTD int64
	orderCount := map[int64][2]int64{} // district → count, max id
	for i := 0; i+2 < len(perDist); i += 3 {
		orderCount[perDist[i]] = [2]int64{perDist[i+1], perDist[i+2]}
	}
	for i := 0; i < len(dist); i += 3 {
		d, next, ytd := dist[i], dist[i+1], dist[i+2]
		distYTD += ytd
		if oc := orderCount[d]; next-1 != oc[0] || next-1 != oc[1] {
			fail("district %d: next order id %d, but %d orders up to id %d", d, next, oc[0], oc[1])
		}
	}

	// Payments.
	var ids []int64
	var paid, badPay int64
	for i := 0; i+4 < len(hist); i += 5 {
		id, hd, cd, cid, amount := hist[i], hist[i+1], hist[i+2], hist[i+3], hist[i+4]
		ids = append(ids, id)
		paid += amount
		if call := o.call(id); call.kind != classPayment || call.district != hd || hd != cd || call.customer != cid || call.amount != amount {
			badPay++
		}
	}
	nPay := int64(len(hist) / 5)
	if badPay > 0 {
		fail("%d history rows differ from their calls' payments", badPay)
	}
	if wh[0] != distYTD || wh[0] != oltpWarehouseYTD+paid {
		fail("warehouse ytd %d, districts' sum %d, initial plus payments %d", wh[0], distYTD, oltpWarehouseYTD+paid)
	}

	// Orders and deliveries.
	var olCount, undelivered, delivered, badOrder int64
	for i := 0; i+4 < len(orders); i += 5 {
		id, d, cid, olCnt, carrier := orders[i], orders[i+1], orders[i+2], orders[i+3], orders[i+4]
		ids = append(ids, id)
		olCount += olCnt
		if carrier == 0 {
			undelivered++
		} else {
			delivered++
		}
		if call := o.call(id); call.kind != classNewOrder || call.district != d || call.customer != cid || int64(len(call.items)) != olCnt {
			badOrder++
		}
	}
	if badOrder > 0 {
		fail("%d orders differ from their calls' new orders", badOrder)
	}
	var logged, badDelivery int64
	for i := 0; i+2 < len(dlog); i += 3 {
		id, carrier, n := dlog[i], dlog[i+1], dlog[i+2]
		ids = append(ids, id)
		logged += n
		if call := o.call(id); call.kind != classDelivery || call.carrier != carrier {
			badDelivery++
		}
	}
	if badDelivery > 0 {
		fail("%d logged deliveries differ from their calls", badDelivery)
	}
	if logged != delivered || cust[3] != delivered {
		fail("%d orders delivered, %d logged by deliveries, %d counted by customers", delivered, logged, cust[3])
	}
	if noCount[0] != undelivered || noJoined[0] != noCount[0] || noJoined[1] != noCount[0] {
		fail("%d new-order rows, %d of them of undelivered orders, %d orders undelivered", noCount[0], noJoined[1], undelivered)
	}
	if lines[0] != olCount || joined[0] != lines[0] || joined[1] != 0 {
		fail("%d order lines, orders count %d, %d with their order, %d delivered unlike their order", lines[0], olCount, joined[0], joined[1])
	}

	// Customers and stock.
	n := int64(oltpDistricts * oltpCustomers)
	if want := n*oltpBalance - paid + lines[2]; cust[0] != want {
		fail("customers' balances sum to %d, want %d (initial - payments + delivered lines)", cust[0], want)
	}
	if cust[1] != n*oltpYTDPayment+paid || cust[2] != nPay {
		fail("customers' ytd payments %d and payment count %d, want %d and %d", cust[1], cust[2], n*oltpYTDPayment+paid, nPay)
	}
	if stock[0] != lines[1] || stock[1] != lines[0] {
		fail("stock ytd %d and order count %d, order lines' quantity %d and count %d", stock[0], stock[1], lines[1], lines[0])
	}

	writing := func(all []int64) []int64 {
		var out []int64
		for _, id := range all {
			if writes(o.call(id).kind) {
				out = append(out, id)
			}
		}
		return out
	}
	cmp := compareIDs(ids, writing(committed), writing(uncertain))
	cmp.problems = append(cmp.problems, problems...)
	return cmp, nil
}
