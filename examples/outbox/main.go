package main

import (
	"cmp"
	"context"
	"database/sql"
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
	command     string // "run" or "reprocess"
	engines     []dbserver.Engine
	namespace   string
	jobs        int
	workers     int
	rejects     int
	poison      int
	maxAttempts int
	processTime time.Duration
	poll        time.Duration
	fixed       bool
	work        bool
	timeout     time.Duration
}

// parseFlags parses the command line: an optional subcommand, then flags.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{command: "run"}
	var db string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		o.command, args = args[0], args[1:]
	}
	if o.command != "run" && o.command != "reprocess" {
		return o, fmt.Errorf("unknown command %q: want run or reprocess", o.command)
	}
	fs := flag.NewFlagSet("outbox "+o.command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&db, "db", "all", "databases to run on: all, postgres or mysql")
	fs.StringVar(&o.namespace, "namespace", "txretry_demo", "schema (PostgreSQL) or database (MySQL) for the tables")
	fs.IntVar(&o.workers, "workers", 4, "concurrent workers")
	fs.IntVar(&o.maxAttempts, "max-attempts", 5, "attempts per job's call, the first included")
	fs.DurationVar(&o.processTime, "process-time", 2*time.Millisecond, "time processing one job takes")
	fs.DurationVar(&o.timeout, "timeout", 50*time.Second, "bound of the whole run, containers excepted")
	if o.command == "run" {
		fs.DurationVar(&o.poll, "poll", time.Hour, "how often waiting workers look for jobs that no commit woke them for")
		fs.IntVar(&o.jobs, "jobs", 40, "jobs to enqueue")
		fs.IntVar(&o.rejects, "rejects", 2, "jobs the processor rejects (a permanent error)")
		fs.IntVar(&o.poison, "poison", 1, "jobs that raise a serialization failure on every attempt")
	} else {
		fs.BoolVar(&o.fixed, "fixed", true, "process with the simulated failures switched off, as after a fix")
		fs.BoolVar(&o.work, "work", true, "work the queue after moving the dead letters back")
	}
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	switch {
	case o.workers < 1 || o.maxAttempts < 1 || o.processTime < 0 || o.timeout <= 0:
		return o, errors.New("-workers, -max-attempts and -timeout must be positive")
	case o.command == "run" && (o.jobs < 1 || o.poll <= 0 || o.rejects < 0 || o.poison < 0 || o.rejects+o.poison > o.jobs):
		return o, errors.New("-jobs and -poll must be positive, and -rejects plus -poison at most -jobs")
	}
	var err error
	o.engines, err = cli.Engines(db)
	return o, err
}

// run is the program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return cli.UsageStatus("outbox", err, stderr)
	}
	p := cli.Program{Name: "outbox", Engines: o.engines, Timeout: o.timeout, Stdout: stdout, Stderr: stderr}
	return p.EachServer(func(ctx context.Context, srv *dbserver.Server) error {
		return runOn(ctx, srv, o, stdout)
	})
}

// runOn runs the command on one server.
func runOn(ctx context.Context, srv *dbserver.Server, o options, stdout io.Writer) error {
	w := cli.SyncWriter(stdout) // the workers' alert hooks write to it too
	ns, err := srv.Namespace(ctx, o.namespace)
	if err != nil {
		return err
	}
	db, err := sql.Open(srv.Engine.Driver(), ns.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(2 * o.workers) // a worker may hold a call's connection and dead-letter on another
	q := NewQueue(db, ns)
	q.MaxAttempts, q.ProcessTime, q.Fixed = o.maxAttempts, o.processTime, o.fixed
	q.Alert = func(dl DeadLetter) {
		fmt.Fprintf(w, "  ALERT dead letter: job %d, correlation %s: %s\n", dl.ID, dl.CorrelationID, dl.Reason)
	}
	fmt.Fprintf(w, "%s, %s\n", srv, ns.Where)

	wantDead := -1 // unknown for reprocess
	work := func() (Stats, error) { return q.Work(ctx, o.workers) }
	switch o.command {
	case "run":
		if err := q.Setup(ctx); err != nil {
			return err
		}
		code := "SQLSTATE 40001"
		if srv.Engine == dbserver.MySQL {
			code = "error 1213"
		}
		fmt.Fprintf(w, "  %d workers wait for jobs, polling every %v: the commit of Enqueue wakes them\n", o.workers, o.poll)
		work = func() (Stats, error) {
			return serveJobs(ctx, q, o, func() error {
				if err := q.Enqueue(ctx, 1, payloads(o.jobs, o.rejects, o.poison)); err != nil {
					return fmt.Errorf("enqueue: %w", err)
				}
				fmt.Fprintf(w, "  enqueued %d jobs: %d rejected by the processor, %d raising %s on every attempt; at most %d attempts per job\n",
					o.jobs, o.rejects, o.poison, code, o.maxAttempts)
				return nil
			})
		}
		wantDead = o.rejects + o.poison
	case "reprocess":
		moved, err := q.Reprocess(ctx)
		if err != nil {
			return fmt.Errorf("reprocess (did `outbox run` create the tables?): %w", err)
		}
		fmt.Fprintf(w, "  moved %d dead letters back to the queue\n", moved)
		if !o.work {
			return nil
		}
		if o.fixed {
			fmt.Fprintln(w, "  processor fixed: simulated failures switched off")
			wantDead = 0
		}
	}

	start := time.Now()
	stats, workErr := work()
	queued, processed, dead, err := q.Counts(ctx)
	if err != nil {
		return errors.Join(workErr, err)
	}
	fmt.Fprintf(w, "  summary: %d processed now (%d in all), %d dead-lettered now, %d dead letters, %d left in the queue; %d attempts in %v\n",
		stats.Processed, processed, stats.DeadLetters, dead, queued, stats.Attempts, time.Since(start).Round(time.Millisecond))
	list, err := q.DeadLetters(ctx)
	if err != nil {
		return errors.Join(workErr, err)
	}
	printDeadLetters(w, list)
	fmt.Fprintln(w)
	switch {
	case workErr != nil:
		return workErr
	case queued != 0:
		return fmt.Errorf("%d jobs left in the queue", queued)
	case wantDead >= 0 && stats.DeadLetters != wantDead:
		return fmt.Errorf("%d jobs dead-lettered, want %d", stats.DeadLetters, wantDead)
	}
	return nil
}

// serveJobs runs the queue's workers with Serve, calls enqueue, which
// enqueues o.jobs jobs and whose commit wakes the workers, and stops them
// once every job was processed or dead-lettered.
func serveJobs(ctx context.Context, q *Queue, o options, enqueue func() error) (Stats, error) {
	handled := make(chan struct{}, o.jobs) // a job processed or dead-lettered: never full
	q.Done = func(Job) { handled <- struct{}{} }
	alert := q.Alert
	q.Alert = func(dl DeadLetter) {
		alert(dl)
		handled <- struct{}{}
	}

	serveCtx, stop := context.WithCancel(ctx)
	defer stop()
	type served struct {
		stats Stats
		err   error
	}
	result := make(chan served, 1)
	go func() {
		stats, err := q.Serve(serveCtx, o.workers, o.poll)
		result <- served{stats, err}
	}()
	err := enqueue()
	for n := 0; err == nil && n < o.jobs; n++ {
		select {
		case <-handled:
		case r := <-result: // a worker could not go on, or ctx ended
			return r.stats, cmp.Or(r.err, ctx.Err())
		}
	}
	stop()
	r := <-result
	return r.stats, cmp.Or(err, r.err)
}

// payloads returns n payloads, poison of them asking for a serialization
// failure and rejects for a rejection, spread over the queue.
func payloads(n, rejects, poison int) []Payload {
	list := make([]Payload, n)
	special := rejects + poison
	for i := range list {
		list[i].Order = 1000 + i + 1
	}
	for k := range special {
		i := (k + 1) * n / (special + 1)
		list[i].Simulate = simulateReject
		if k < poison {
			list[i].Simulate = simulatePoison
		}
	}
	return list
}

// printDeadLetters prints the dead letters, each attempt history condensed
// into runs of the same class, code and type.
func printDeadLetters(w io.Writer, list []DeadLetter) {
	if len(list) == 0 {
		fmt.Fprintln(w, "  no dead letters")
		return
	}
	fmt.Fprintln(w, "  dead letters:")
	for _, dl := range list {
		fmt.Fprintf(w, "    job %d, correlation %s, payload %s\n", dl.ID, dl.CorrelationID, dl.Payload)
		fmt.Fprintf(w, "      reason    %s\n", dl.Reason)
		fmt.Fprintf(w, "      attempts  %s\n", condense(dl.Attempts))
	}
}

// condense renders attempt records as runs: "5× Retryable 40001 *pgconn.PgError (workers 1, 3)".
func condense(records []AttemptRecord) string {
	if len(records) == 0 {
		return "none recorded"
	}
	type run struct {
		key     string
		n       int
		workers []int
	}
	var runs []run
	for _, r := range records {
		key := strings.Join(strings.Fields(r.Class+" "+r.Code+" "+r.Type), " ")
		if len(runs) == 0 || runs[len(runs)-1].key != key {
			runs = append(runs, run{key: key})
		}
		last := &runs[len(runs)-1]
		last.n++
		if len(last.workers) == 0 || last.workers[len(last.workers)-1] != r.Worker {
			last.workers = append(last.workers, r.Worker)
		}
	}
	parts := make([]string, len(runs))
	for i, r := range runs {
		ws := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(r.workers)), ", "), "[]")
		label := "worker"
		if len(r.workers) > 1 {
			label = "workers"
		}
		parts[i] = fmt.Sprintf("%d× %s (%s %s)", r.n, r.key, label, ws)
	}
	return strings.Join(parts, "; ")
}
