package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
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
	engines    []dbserver.Engine
	namespace  string
	balance    int64
	amount     int64
	concurrent int
	timeout    time.Duration
}

// parseFlags parses the command line.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var db string
	fs := flag.NewFlagSet("payment", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&db, "db", "all", "databases to run on: all, postgres or mysql")
	fs.StringVar(&o.namespace, "namespace", "txretry_demo", "schema (PostgreSQL) or database (MySQL) for the tables")
	fs.Int64Var(&o.balance, "balance", 1000, "opening balance of the account")
	fs.Int64Var(&o.amount, "amount", 250, "amount of each payment")
	fs.IntVar(&o.concurrent, "concurrent", 8, "concurrent calls with one key")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "bound of the whole run, containers excepted")
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	switch {
	case o.amount < 1 || o.balance < 2*o.amount || o.concurrent < 1 || o.timeout <= 0:
		return o, errors.New("-amount, -concurrent and -timeout must be positive, and -balance at least twice -amount")
	}
	var err error
	o.engines, err = cli.Engines(db)
	return o, err
}

// run is the program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return cli.UsageStatus("payment", err, stderr)
	}
	p := cli.Program{Name: "payment", Engines: o.engines, Timeout: o.timeout, Stdout: stdout, Stderr: stderr}
	return p.EachServer(func(ctx context.Context, srv *dbserver.Server) error {
		return demo(ctx, srv, o, stdout)
	})
}

// attemptCounter counts the attempts of the calls it observes.
type attemptCounter struct{ n atomic.Int64 }

// Observe implements txretry.Observer.
func (c *attemptCounter) Observe(_ context.Context, e txretry.Event) {
	if e.Kind == txretry.AttemptStarted {
		c.n.Add(1)
	}
}

// demo runs the payment demo on one server and prints what happens.
func demo(ctx context.Context, srv *dbserver.Server, o options, w io.Writer) error {
	ns, err := srv.Namespace(ctx, o.namespace)
	if err != nil {
		return err
	}
	db, err := sql.Open(srv.Engine.Driver(), ns.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(o.concurrent + 2)
	p := NewPayments(db, ns)
	attempts := &attemptCounter{}
	p.observer = attempts
	if err := p.Setup(ctx, o.balance); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s, %s\n", srv, ns.Where)
	fmt.Fprintf(w, "  keys in %s (txretry.WithIdempotencyKey), receipts in %s\n", p.q.keys, p.q.payments)

	// 1. A payment, then the same payment again, as a client would send it
	// after a timeout: the key is made once, before the first call.
	key := NewKey()
	fmt.Fprintf(w, "  key %s generated before the retry loop\n", key)
	first, made, err := p.Pay(ctx, key, 1, o.amount)
	if err != nil {
		return fmt.Errorf("first call: %w", err)
	}
	fmt.Fprintf(w, "  call 1: new=%v, paid %d from account 1, balance %d → %d (%d attempt(s))\n",
		made, first.Amount, o.balance, first.BalanceAfter, attempts.n.Swap(0))
	if !made {
		return errors.New("first call did not make the payment")
	}
	again, made, err := p.Pay(ctx, key, 1, o.amount)
	if err != nil {
		return fmt.Errorf("second call: %w", err)
	}
	fmt.Fprintf(w, "  call 2, same key: new=%v, returned the earlier receipt (balance after %d), no second debit (%d attempt(s))\n",
		made, again.BalanceAfter, attempts.n.Swap(0))
	if made || again != first {
		return fmt.Errorf("second call returned %+v (new=%v), want the first receipt %+v", again, made, first)
	}
	if _, _, err := p.Pay(ctx, key, 1, o.amount+1); !errors.Is(err, ErrKeyReused) {
		return fmt.Errorf("same key, other amount: error %v, want ErrKeyReused", err)
	}
	fmt.Fprintf(w, "  call 3, same key, amount %d: refused (%v)\n", o.amount+1, ErrKeyReused)
	attempts.n.Store(0)

	// 2. Concurrent calls with one new key: one makes the payment, the
	// others wait on the key and return its receipt.
	key2 := NewKey()
	receipts := make([]Receipt, o.concurrent)
	news := make([]bool, o.concurrent)
	errs := make([]error, o.concurrent)
	var wg sync.WaitGroup
	for i := range o.concurrent {
		wg.Go(func() { receipts[i], news[i], errs[i] = p.Pay(ctx, key2, 1, o.amount) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("concurrent calls: %w", err)
	}
	made2 := 0
	for i := range o.concurrent {
		if news[i] {
			made2++
		}
		if receipts[i] != receipts[0] {
			return fmt.Errorf("concurrent calls returned different receipts: %+v and %+v", receipts[0], receipts[i])
		}
	}
	fmt.Fprintf(w, "  %d concurrent calls, one new key: %d made the payment, %d returned its receipt (balance after %d); %d attempts\n",
		o.concurrent, made2, o.concurrent-made2, receipts[0].BalanceAfter, attempts.n.Swap(0))
	if made2 != 1 {
		return fmt.Errorf("%d concurrent calls made the payment, want 1", made2)
	}

	// 3. The account was debited once per key.
	balance, err := p.Balance(ctx, 1)
	if err != nil {
		return err
	}
	want := o.balance - 2*o.amount
	fmt.Fprintf(w, "  check: balance %d = %d - 2×%d (two keys, each paid once)\n\n", balance, o.balance, o.amount)
	if balance != want {
		return fmt.Errorf("balance %d, want %d", balance, want)
	}
	return nil
}
