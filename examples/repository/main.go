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
	fs := flag.NewFlagSet("repository", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.customers, "customers", 20, "concurrent customers")
	fs.IntVar(&o.orders, "orders", 3, "orders per customer, of 1 to 3 units each")
	fs.Int64Var(&o.stock, "stock", 100, "units in stock at the start")
	fs.StringVar(&o.isolation, "isolation", "serializable", "isolation level: serializable, repeatable-read or read-committed")
	fs.StringVar(&o.namespace, "namespace", "txretry_demo", "PostgreSQL schema for the tables")
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
	return o, nil
}

// run is the program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return cli.UsageStatus("repository", err, stderr)
	}
	p := cli.Program{Name: "repository", Engines: []dbserver.Engine{dbserver.Postgres}, Timeout: o.timeout, Stdout: stdout, Stderr: stderr}
	return p.Run(func(ctx context.Context, servers []*dbserver.Server, findErr error) int {
		if findErr != nil {
			fmt.Fprintf(stdout, "%v\nFAIL: no database reachable\n", findErr)
			return 1
		}
		rep, err := demo(ctx, servers[0], o)
		printReport(stdout, rep)
		switch {
		case err != nil:
			fmt.Fprintf(stdout, "FAIL: %v\n", err)
			return 1
		case !rep.ok():
			fmt.Fprintln(stdout, "FAIL: the invariant does not hold")
			return 1
		}
		fmt.Fprintln(stdout, "ok")
		return 0
	})
}

// report is what a run found.
type report struct {
	header      string
	placed      int
	units       int64
	outOfStock  int
	failed      map[string]int
	attempts    int
	retries     map[string]int
	stock       int64
	finalStock  int64
	ordered     int64
	elapsed     time.Duration
	sample      string   // a customer
	sampleLines []string // the customer's orders
}

// ok reports whether no unit was lost or oversold: the stock left plus the
// units ordered is the stock at the start, and the stock is not negative.
func (r report) ok() bool {
	return r.finalStock >= 0 && r.finalStock+r.ordered == r.stock && r.ordered == r.units
}

// observer counts the attempts and the retryable errors by code.
type observer struct {
	mu       sync.Mutex
	attempts int
	retries  map[string]int
}

// Observe implements txretry.Observer.
func (c *observer) Observe(_ context.Context, e txretry.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case e.Kind == txretry.AttemptStarted:
		c.attempts++
	case e.Kind == txretry.AttemptFailed && e.Class == txretry.Retryable:
		c.retries[e.Code]++
	}
}

// sku is the product the customers order.
const sku = "sku-1"

// demo runs the concurrent orders on srv.
func demo(ctx context.Context, srv *dbserver.Server, o options) (report, error) {
	rep := report{stock: o.stock, failed: map[string]int{}}
	ns, err := srv.Namespace(ctx, o.namespace)
	if err != nil {
		return rep, err
	}
	if ns.Prefix != "" {
		return rep, fmt.Errorf("the repository example needs a schema of its own; %s", ns.Where)
	}
	rep.header = fmt.Sprintf("%s, %s, pgx stdlib (database/sql), %s", srv, ns.Where, strings.ToUpper(strings.ReplaceAll(o.isolation, "-", " ")))
	db, err := sql.Open("pgx", ns.DSN)
	if err != nil {
		return rep, err
	}
	defer db.Close()
	db.SetMaxOpenConns(o.customers)
	db.SetMaxIdleConns(o.customers)

	obs := &observer{retries: map[string]int{}}
	svc := NewService(db, txretry.WithIsolation(isolations[o.isolation]), txretry.WithObserver(obs))
	if err := svc.Setup(ctx, sku, o.stock); err != nil {
		return rep, err
	}

	type result struct {
		placed, outOfStock int
		units              int64
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
				_, err := svc.PlaceOrder(ctx, customerName(c), sku, qty)
				switch {
				case err == nil:
					r.placed++
					r.units += qty
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
		for k, n := range r.failed {
			rep.failed[k] += n
		}
	}
	rep.attempts, rep.retries = obs.attempts, obs.retries

	if rep.finalStock, rep.ordered, err = svc.Stock(ctx, sku); err != nil {
		return rep, err
	}
	orders, err := svc.Orders(ctx, customerName(0))
	if err != nil {
		return rep, err
	}
	rep.sample = customerName(0)
	for _, ord := range orders {
		rep.sampleLines = append(rep.sampleLines, fmt.Sprintf("#%d %d×%s", ord.ID, ord.Quantity, ord.Sku))
	}
	return rep, nil
}

// customerName names customer c.
func customerName(c int) string { return fmt.Sprintf("customer-%02d", c+1) }

// printReport prints a run's report.
func printReport(w io.Writer, r report) {
	if r.header == "" {
		return
	}
	failed := 0
	for _, n := range r.failed {
		failed += n
	}
	fmt.Fprintln(w, r.header)
	fmt.Fprintf(w, "  orders      %d placed (%d units), %d refused (out of stock), %d failed\n",
		r.placed, r.units, r.outOfStock, failed)
	for _, k := range slices.Sorted(maps.Keys(r.failed)) {
		fmt.Fprintf(w, "              %d× %s\n", r.failed[k], k)
	}
	var codes []string
	for _, k := range slices.Sorted(maps.Keys(r.retries)) {
		codes = append(codes, fmt.Sprintf("%s ×%d", k, r.retries[k]))
	}
	if len(codes) == 0 {
		codes = []string{"none"}
	}
	fmt.Fprintf(w, "  attempts    %d; retryable errors: %s\n", r.attempts, strings.Join(codes, ", "))
	fmt.Fprintf(w, "  elapsed     %v\n", r.elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "  orders of %s: %s\n", r.sample, strings.Join(r.sampleLines, ", "))
	if r.ok() {
		fmt.Fprintf(w, "  invariant   ok: stock %d → %d, %d units ordered, none lost or oversold\n", r.stock, r.finalStock, r.ordered)
		return
	}
	fmt.Fprintf(w, "  invariant   FAILED: stock %d → %d but %d units ordered: %d units sold that were not there (lost updates)\n",
		r.stock, r.finalStock, r.ordered, r.ordered+r.finalStock-r.stock)
}
