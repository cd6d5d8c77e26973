package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/examples/internal/cli"
	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/txretry"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line's.
type options struct {
	customers int
	orders    int
	stock     int64
	isolation string
	engines   []dbserver.Engine
	namespace string
	timeout   time.Duration
}

// isolations maps the -isolation flag to levels.
var isolations = map[string]sql.IsolationLevel{
	"serializable":    sql.LevelSerializable,
	"repeatable-read": sql.LevelRepeatableRead,
	"read-committed":  sql.LevelReadCommitted,
}

// parseFlags parses the command line.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var db string
	fs := flag.NewFlagSet("repository", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.customers, "customers", 20, "concurrent customers")
	fs.IntVar(&o.orders, "orders", 3, "orders per customer, of 1 to 3 units each")
	fs.Int64Var(&o.stock, "stock", 100, "units in stock at the start")
	fs.StringVar(&o.isolation, "isolation", "serializable", "isolation level: serializable, repeatable-read or read-committed")
	fs.StringVar(&db, "db", "all", "databases to run on: all, postgres or mysql")
	fs.StringVar(&o.namespace, "namespace", "txretry_demo", "schema (PostgreSQL) or database (MySQL) for the tables")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "bound of the whole run, containers excepted")
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	switch _, ok := isolations[o.isolation]; {
	case !ok:
		return o, fmt.Errorf("-isolation %q: want serializable, repeatable-read or read-committed", o.isolation)
	case o.customers < 1 || o.orders < 1 || o.stock < 0 || o.timeout <= 0:
		return o, errors.New("-customers, -orders and -timeout must be positive, -stock not negative")
	}
	var err error
	o.engines, err = cli.Engines(db)
	return o, err
}

// run is the program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return cli.UsageStatus("repository", err, stderr)
	}
	p := cli.Program{Name: "repository", Engines: o.engines, Timeout: o.timeout, Stdout: stdout, Stderr: stderr}
	return p.Run(func(ctx context.Context, servers []*dbserver.Server, findErr error) int {
		return runAll(ctx, servers, findErr, o, stdout)
	})
}

// runAll places the orders with every driver on every server found, prints
// the reports to w and returns the exit status.
func runAll(ctx context.Context, servers []*dbserver.Server, findErr error, o options, w io.Writer) int {
	fmt.Fprintf(w, "repository: %d customers × %d orders of 1 to 3 units, stock %d, %s\n",
		o.customers, o.orders, o.stock, strings.ToUpper(strings.ReplaceAll(o.isolation, "-", " ")))
	if findErr != nil {
		fmt.Fprintf(w, "\n%v\n", findErr)
	}
	if len(servers) == 0 {
		fmt.Fprintln(w, "\nFAIL: no database reachable; set TXRETRY_PG_DSN and/or TXRETRY_MYSQL_DSN, or start Docker")
		return 1
	}
	ok := !cli.Misconfigured(findErr) // a DSN that is set but broken is an error, not a skip
	start := time.Now()
	for _, srv := range servers {
		ns, err := srv.Namespace(ctx, o.namespace)
		if err == nil && ns.Prefix != "" {
			// sqlc's queries name the tables as they are.
			err = fmt.Errorf("the repository example needs a schema or database of its own; %s", ns.Where)
		}
		if err != nil {
			fmt.Fprintf(w, "\n%s: %v\n", srv, err)
			ok = false
			continue
		}
		fmt.Fprintf(w, "\n%s, %s\n", srv, ns.Where)
		for _, d := range driversFor(srv.Engine) {
			rep, err := demo(ctx, ns, d, o)
			printReport(w, rep)
			if err != nil {
				fmt.Fprintf(w, "    FAIL: %v\n", err)
			}
			ok = ok && err == nil && rep.ok()
		}
	}
	if !ok {
		fmt.Fprintf(w, "\nFAIL (%v)\n", time.Since(start).Round(time.Millisecond))
		return 1
	}
	fmt.Fprintf(w, "\nok: the invariant holds on every run (%v)\n", time.Since(start).Round(time.Millisecond))
	return 0
}

// driver names a way of reaching a server, and the store package sqlc
// generated for it.
type driver string

// The drivers the program runs.
const (
	pgxNative driver = "pgx native, pgxretry.RunInTx, package pgxstore"
	pgxStdlib driver = "pgx stdlib (database/sql), txretry.RunInTx, package pgstore"
	mysqlSQL  driver = "go-sql-driver/mysql (database/sql), txretry.RunInTx, package mysqlstore"
)

// driversFor lists the drivers to run on a server of engine e.
func driversFor(e dbserver.Engine) []driver {
	if e == dbserver.Postgres {
		return []driver{pgxNative, pgxStdlib}
	}
	return []driver{mysqlSQL}
}

// openService connects to ns with driver d, with room for conns
// connections, and returns the service over the connection, publishing to
// events, and the function that closes it.
func openService(ctx context.Context, ns dbserver.Namespace, d driver, conns int, events *Publisher, opts ...txretry.Option) (Service, func(), error) {
	if d == pgxNative {
		cfg, err := pgxpool.ParseConfig(ns.DSN)
		if err != nil {
			return nil, nil, err
		}
		cfg.MaxConns = int32(conns)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		return NewPgxService(pool, events, opts...), pool.Close, nil
	}
	db, err := sql.Open(ns.Engine.Driver(), ns.DSN)
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	closeDB := func() { db.Close() }
	if d == mysqlSQL {
		return NewMySQLService(db, events, opts...), closeDB, nil
	}
	return NewPostgresService(db, events, opts...), closeDB, nil
}

// report is what a run found.
type report struct {
	driver      driver
	ran         bool // the orders ran and the figures below are filled in
	placed      int
	units       int64
	outOfStock  int
	failed      map[string]int
	attempts    int
	retried     int
	retries     map[string]int
	stock       int64
	finalStock  int64
	ordered     int64
	placedIDs   []int64       // the ids of the orders PlaceOrder returned
	recordedIDs []int64       // the ids in the orders table
	events      []OrderPlaced // what the service published
	elapsed     time.Duration
	sample      string   // the first customer with a placed order
	sampleLines []string // the customer's orders
}

// ok reports whether the run kept the stock's invariant and published
// every order once.
func (r report) ok() bool { return r.stockOK() && r.publishedOnce() }

// stockOK reports whether no unit was lost or oversold: the stock left plus
// the units ordered is the stock at the start, and the stock is not
// negative.
func (r report) stockOK() bool {
	return r.finalStock >= 0 && r.finalStock+r.ordered == r.stock && r.ordered == r.units
}

// publishedOnce reports whether every placed order is recorded and was
// published exactly once, and nothing else was published: no event for a
// refused or failed call, nor for an attempt that was rolled back.
func (r report) publishedOnce() bool {
	published := make([]int64, len(r.events))
	for i, e := range r.events {
		published[i] = e.Order.ID
	}
	slices.Sort(published)
	placed := slices.Sorted(slices.Values(r.placedIDs))
	return slices.Equal(published, placed) && slices.Equal(placed, slices.Sorted(slices.Values(r.recordedIDs)))
}

// publishedAfterRetry returns how many events come from calls that were
// retried before they committed.
func (r report) publishedAfterRetry() int {
	n := 0
	for _, e := range r.events {
		if e.Attempt > 1 {
			n++
		}
	}
	return n
}

// observer counts the attempts, the calls retried and the retryable errors
// by code.
type observer struct {
	mu       sync.Mutex
	attempts int
	retried  int // calls that ran a second attempt
	retries  map[string]int
}

// Observe implements txretry.Observer.
func (c *observer) Observe(_ context.Context, e txretry.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case e.Kind == txretry.AttemptStarted:
		c.attempts++
		if e.Attempt == 2 {
			c.retried++
		}
	case e.Kind == txretry.AttemptFailed && e.Class == txretry.Retryable:
		c.retries[e.Code]++
	}
}

// sku is the product the customers order.
const sku = "sku-1"

// demo runs the concurrent orders in ns with driver d.
func demo(ctx context.Context, ns dbserver.Namespace, d driver, o options) (report, error) {
	rep := report{driver: d, stock: o.stock, failed: map[string]int{}}
	obs := &observer{retries: map[string]int{}}
	events := &Publisher{}
	svc, closeService, err := openService(ctx, ns, d, o.customers, events,
		txretry.WithIsolation(isolations[o.isolation]), txretry.WithObserver(obs))
	if err != nil {
		return rep, err
	}
	defer closeService()
	if err := svc.Setup(ctx, sku, o.stock); err != nil {
		return rep, err
	}

	type result struct {
		placed, outOfStock int
		units              int64
		ids                []int64
		failed             map[string]int
	}
	results := make([]result, o.customers)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range o.customers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c), 7))
			r := result{failed: map[string]int{}}
			for range o.orders {
				qty := 1 + rnd.Int64N(3)
				order, err := svc.PlaceOrder(ctx, customerName(c), sku, qty)
				switch {
				case err == nil:
					r.placed++
					r.units += qty
					r.ids = append(r.ids, order.ID)
				case errors.Is(err, ErrOutOfStock):
					r.outOfStock++
				default:
					r.failed[txretry.Describe(err)]++
				}
			}
			results[c] = r
		})
	}
	wg.Wait()
	rep.elapsed = time.Since(start)
	for _, r := range results {
		rep.placed += r.placed
		rep.outOfStock += r.outOfStock
		rep.units += r.units
		rep.placedIDs = append(rep.placedIDs, r.ids...)
		for k, n := range r.failed {
			rep.failed[k] += n
		}
	}
	rep.attempts, rep.retried, rep.retries = obs.attempts, obs.retried, obs.retries
	rep.events = events.Events() // every call has returned, and with it its hooks

	if rep.finalStock, rep.ordered, err = svc.Stock(ctx, sku); err != nil {
		return rep, err
	}
	sample := 0 // the first customer with a placed order, whose orders the report lists
	for sample < len(results)-1 && results[sample].placed == 0 {
		sample++
	}
	for c := range o.customers {
		orders, err := svc.Orders(ctx, customerName(c))
		if err != nil {
			return rep, err
		}
		for _, ord := range orders {
			rep.recordedIDs = append(rep.recordedIDs, ord.ID)
			if c == sample {
				rep.sampleLines = append(rep.sampleLines, fmt.Sprintf("#%d %d×%s", ord.ID, ord.Quantity, ord.Sku))
			}
		}
	}
	rep.ran, rep.sample = true, customerName(sample)
	return rep, nil
}

// customerName names customer c.
func customerName(c int) string { return fmt.Sprintf("customer-%02d", c+1) }

// codeNames names the codes the program expects to see.
var codeNames = map[string]string{
	"40001": "serialization_failure",
	"40P01": "deadlock_detected",
	"1213":  "ER_LOCK_DEADLOCK",
}

// printReport prints a run's report.
func printReport(w io.Writer, r report) {
	fmt.Fprintf(w, "  %s\n", r.driver)
	if !r.ran {
		return
	}
	failed := 0
	for _, n := range r.failed {
		failed += n
	}
	fmt.Fprintf(w, "    orders      %d placed (%d units), %d refused (out of stock), %d failed\n",
		r.placed, r.units, r.outOfStock, failed)
	for _, k := range slices.Sorted(maps.Keys(r.failed)) {
		fmt.Fprintf(w, "                %d× %s\n", r.failed[k], k)
	}
	var codes []string
	for _, k := range slices.Sorted(maps.Keys(r.retries)) {
		name := k
		if n, ok := codeNames[k]; ok {
			name += " " + n
		}
		codes = append(codes, fmt.Sprintf("%s ×%d", name, r.retries[k]))
	}
	if len(codes) == 0 {
		codes = []string{"none"}
	}
	fmt.Fprintf(w, "    attempts    %d (%d calls retried); retryable errors: %s\n", r.attempts, r.retried, strings.Join(codes, ", "))
	fmt.Fprintf(w, "    elapsed     %v\n", r.elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "    orders of %s: %s\n", r.sample, strings.Join(r.sampleLines, ", "))
	if r.publishedOnce() {
		fmt.Fprintf(w, "    events      %d published after commit, one per placed order (%d after a retry)\n",
			len(r.events), r.publishedAfterRetry())
	} else {
		fmt.Fprintf(w, "    events      FAILED: %d published for %d orders placed and %d recorded; want one per order\n",
			len(r.events), len(r.placedIDs), len(r.recordedIDs))
	}
	if r.stockOK() {
		fmt.Fprintf(w, "    invariant   ok: stock %d → %d, %d units ordered, none lost or oversold\n", r.stock, r.finalStock, r.ordered)
		return
	}
	fmt.Fprintf(w, "    invariant   FAILED: stock %d → %d but %d units ordered: %d units sold that were not there (lost updates)\n",
		r.stock, r.finalStock, r.ordered, r.ordered+r.finalStock-r.stock)
}
