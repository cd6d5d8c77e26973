package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/txretry/txretry/examples/internal/cli"
	"github.com/txretry/txretry/integration/dbserver"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line's.
type options struct {
	config
	engines   []dbserver.Engine
	namespace string
	timeout   time.Duration
}

// parseFlags parses the command line.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var db string
	fs := flag.NewFlagSet("bank", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.workers, "workers", 32, "concurrent workers")
	fs.IntVar(&o.transfers, "transfers", 25, "transfers per worker")
	fs.IntVar(&o.accounts, "accounts", 10, "accounts the money moves among (at least 2)")
	fs.Int64Var(&o.balance, "balance", 1000, "opening balance of each account")
	fs.Int64Var(&o.maxAmount, "max-amount", 50, "largest amount of one transfer")
	fs.DurationVar(&o.deadline, "deadline", 5*time.Second, "deadline of each call, retries included")
	fs.IntVar(&o.maxAttempts, "max-attempts", 10, "attempts per call, the first included")
	fs.StringVar(&db, "db", "all", "databases to run on: all, postgres or mysql")
	fs.StringVar(&o.namespace, "namespace", "txretry_demo", "schema (PostgreSQL) or database (MySQL) for the demo's tables")
	fs.DurationVar(&o.timeout, "timeout", 50*time.Second, "bound of the whole run, containers excepted")
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	if o.workers < 1 || o.transfers < 1 || o.accounts < 2 || o.balance < 0 ||
		o.maxAmount < 1 || o.deadline <= 0 || o.maxAttempts < 1 || o.timeout <= 0 {
		return o, errors.New("-workers, -transfers, -max-amount, -max-attempts, -deadline and -timeout must be positive, -accounts at least 2")
	}
	var err error
	o.engines, err = cli.Engines(db)
	return o, err
}

// run is the program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return cli.UsageStatus("bank", err, stderr)
	}
	p := cli.Program{Name: "bank", Engines: o.engines, Timeout: o.timeout, Stdout: stdout, Stderr: stderr}
	return p.Run(func(ctx context.Context, servers []*dbserver.Server, findErr error) int {
		return demo(ctx, servers, findErr, o, stdout)
	})
}

// demo runs the demo with every driver on every server found, prints its
// reports to w and returns the exit status.
func demo(ctx context.Context, servers []*dbserver.Server, findErr error, o options, w io.Writer) int {
	fmt.Fprintf(w, "txretry demo: %d workers × %d transfers among %d accounts, SERIALIZABLE, at most %d attempts and %v per call\n",
		o.workers, o.transfers, o.accounts, o.maxAttempts, o.deadline)
	for _, err := range unwrapJoin(findErr) {
		fmt.Fprintf(w, "\n%v\n", err)
	}
	ok := !cli.Misconfigured(findErr) // a DSN that is set but broken is an error, not a skip
	if len(servers) == 0 {
		fmt.Fprintln(w, "\nFAIL: no database reachable; set TXRETRY_PG_DSN and/or TXRETRY_MYSQL_DSN, or start Docker")
		return 1
	}

	start := time.Now()
	for _, srv := range servers {
		ns, err := srv.Namespace(ctx, o.namespace)
		if err != nil {
			fmt.Fprintf(w, "\n%s: %v\n", srv, err)
			ok = false
			continue
		}
		fmt.Fprintf(w, "\n%s, %s\n", srv, ns.Where)
		for _, d := range driversFor(srv.Engine) {
			rep, err := runBank(ctx, srv, ns, d, o.config)
			printReport(w, rep)
			if err != nil {
				fmt.Fprintf(w, "    error       %v\n", err)
				ok = false
			}
			ok = ok && rep.invariant.ok()
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintf(w, "\nstopped early: %v\n", context.Cause(ctx))
		ok = false
	}
	if !ok {
		fmt.Fprintf(w, "\nFAIL (%v)\n", time.Since(start).Round(time.Millisecond))
		return 1
	}
	fmt.Fprintf(w, "\nok: every invariant holds (%v)\n", time.Since(start).Round(time.Millisecond))
	return 0
}

// unwrapJoin returns the errors joined in err, or err alone.
func unwrapJoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// codeNames names the codes the demo expects to see.
var codeNames = map[string]string{
	"40001": "serialization_failure",
	"40P01": "deadlock_detected",
	"55P03": "lock_not_available (pgxretry's lock timeout)",
	"1213":  "ER_LOCK_DEADLOCK",
}

// printReport prints one run's report.
func printReport(w io.Writer, r report) {
	fmt.Fprintf(w, "  %s\n", r.driver)
	failed := 0
	for _, n := range r.failed {
		failed += n
	}
	fmt.Fprintf(w, "    calls       %d: %d committed, %d declined (insufficient funds), %d failed",
		r.calls, r.committed, r.declined, failed)
	if r.uncertain > 0 {
		fmt.Fprintf(w, ", %d uncertain", r.uncertain)
	}
	fmt.Fprintln(w)
	for _, k := range sortedKeys(r.failed) {
		fmt.Fprintf(w, "                %d× %s\n", r.failed[k], k)
	}
	fmt.Fprintf(w, "    attempts    %d (%d retries)\n", r.attempts, r.attempts-r.calls)
	var codes []string
	for _, k := range sortedKeys(r.retryable) {
		name := k
		if n, ok := codeNames[k]; ok {
			name += " " + n
		}
		codes = append(codes, fmt.Sprintf("%s ×%d", name, r.retryable[k]))
	}
	if len(codes) == 0 {
		codes = []string{"none"}
	}
	fmt.Fprintf(w, "    retryable   %s\n", strings.Join(codes, ", "))
	fmt.Fprintf(w, "    elapsed     %v\n", r.elapsed.Round(time.Millisecond))
	if r.invariant.ok() {
		fmt.Fprintf(w, "    invariant   ok: balances sum to %d as opened; the %d committed transfers are recorded once each and match every balance; failed calls left no trace\n",
			r.invariant.total, r.committed)
		return
	}
	fmt.Fprintf(w, "    invariant   FAILED: %s\n", strings.Join(r.invariant.problems, "; "))
}
