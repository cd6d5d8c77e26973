package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/txretry/txretry/examples/internal/cli"
	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/otelretry"
	"github.com/txretry/txretry/txretry/slogretry"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is what one run does.
type config struct {
	workers  int
	calls    int // per worker
	allSpans bool
}

// options are the command line's.
type options struct {
	config
	namespace string
	timeout   time.Duration
}

// parseFlags parses the command line.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("observe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.workers, "workers", 4, "concurrent workers")
	fs.IntVar(&o.calls, "calls", 5, "increments per worker")
	fs.BoolVar(&o.allSpans, "all-spans", false, "print the spans of first-try commits too")
	fs.StringVar(&o.namespace, "namespace", "txretry_observe", "schema for the program's table")
	fs.DurationVar(&o.timeout, "timeout", 50*time.Second, "bound of the whole run, containers excepted")
	if err := cli.Parse(fs, args); err != nil {
		return o, err
	}
	if o.workers < 1 || o.calls < 1 || o.timeout <= 0 {
		return o, errors.New("-workers, -calls and -timeout must be positive")
	}
	return o, nil
}

// run is the program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return cli.UsageStatus("observe", err, stderr)
	}
	p := cli.Program{Name: "observe", Engines: []dbserver.Engine{dbserver.Postgres}, Timeout: o.timeout, Stdout: stdout, Stderr: stderr}
	return p.Run(func(ctx context.Context, servers []*dbserver.Server, findErr error) int {
		if findErr != nil {
			fmt.Fprintf(stdout, "FAIL: %v\n", findErr)
			return 1
		}
		return demo(ctx, servers[0], o, stdout)
	})
}

// demo runs the program on srv, printing to w, and returns the exit status.
func demo(ctx context.Context, srv *dbserver.Server, o options, w io.Writer) int {
	ns, err := srv.Namespace(ctx, o.namespace)
	if err != nil {
		fmt.Fprintf(w, "FAIL: %s: %v\n", srv, err)
		return 1
	}
	fmt.Fprintf(w, "%s, %s: %d workers × %d increments of one row, SERIALIZABLE\n\n", srv, ns.Where, o.workers, o.calls)
	sum, err := observe(ctx, ns, o.config, w)
	if err != nil {
		fmt.Fprintf(w, "\nFAIL: %v\n", err)
		return 1
	}
	fmt.Fprintf(w, "\nok: %d calls, %d committed, %d attempts; the counter is %d\n", sum.calls, sum.committed, sum.attempts, sum.counter)
	return 0
}

// summary is what a run did, counted by the program itself.
type summary struct {
	calls, committed, attempts int64
	counter                    int64
}

// observe runs the burst with both observers, writing the log lines, spans
// and metrics to w, and checks the counter against the commits.
func observe(ctx context.Context, ns dbserver.Namespace, cfg config, w io.Writer) (summary, error) {
	var sum summary
	db, err := sql.Open(dbserver.Postgres.Driver(), ns.DSN)
	if err != nil {
		return sum, err
	}
	defer db.Close()
	hot := ns.Table("observe_hot")
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + hot,
		"CREATE TABLE " + hot + " (id int PRIMARY KEY, n bigint NOT NULL)",
		"INSERT INTO " + hot + " (id, n) VALUES (1, 0)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return sum, fmt.Errorf("set up the table: %w", err)
		}
	}

	// Writes from several exporters and the logger share w.
	out := cli.SyncWriter(w)

	// Metrics: read once, at shutdown.
	mexp, err := stdoutmetric.New(stdoutmetric.WithWriter(out), stdoutmetric.WithoutTimestamps())
	if err != nil {
		return sum, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(time.Hour))))
	// Spans: exported as each call ends.
	texp, err := stdouttrace.New(stdouttrace.WithWriter(out), stdouttrace.WithoutTimestamps())
	if err != nil {
		return sum, err
	}
	var spans sdktrace.SpanExporter = texp
	if !cfg.allSpans {
		spans = newRetriedOnly(texp)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))

	tel, err := otelretry.NewObserver(otelretry.WithMeterProvider(mp), otelretry.WithTracerProvider(tp),
		otelretry.WithDBSystem("postgresql"))
	if err != nil {
		return sum, err
	}
	logs := slogretry.New(slog.New(slog.NewTextHandler(out, nil)))
	// The program's own count of attempts, to print in the summary.
	count := txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
		if e.Kind == txretry.CallFinished {
			atomic.AddInt64(&sum.attempts, int64(e.Attempts))
		}
	})

	// The context fn receives carries the call's span: the spans started in
	// fn (here one per attempt, or an instrumented driver's) are its children.
	app := tp.Tracer("observe")
	increment := func(ctx context.Context, tx *sql.Tx) error {
		ctx, span := app.Start(ctx, "fn")
		defer span.End()
		var n int64
		if err := tx.QueryRowContext(ctx, "SELECT n FROM "+hot+" WHERE id = 1").Scan(&n); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE "+hot+" SET n = $1 WHERE id = 1", n+1)
		return err
	}
	var (
		wg   sync.WaitGroup
		errs = make(chan error, cfg.workers*cfg.calls)
	)
	for range cfg.workers {
		wg.Go(func() {
			for range cfg.calls {
				err := txretry.RunInTx(ctx, db, increment,
					txretry.WithObserver(tel), txretry.WithObserver(logs), txretry.WithObserver(count),
					txretry.WithLabel("increment"), txretry.WithIsolation(sql.LevelSerializable),
					txretry.WithMaxAttempts(50))
				atomic.AddInt64(&sum.calls, 1)
				if err != nil {
					errs <- err
					continue
				}
				atomic.AddInt64(&sum.committed, 1)
			}
		})
	}
	wg.Wait()
	close(errs)
	var failed []error
	for err := range errs {
		failed = append(failed, errors.New(txretry.Describe(err)))
	}

	fmt.Fprintln(out, "\nmetrics:")
	shutdown := errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx))
	if err := db.QueryRowContext(ctx, "SELECT n FROM "+hot+" WHERE id = 1").Scan(&sum.counter); err != nil {
		return sum, err
	}
	if sum.counter != sum.committed {
		failed = append(failed, fmt.Errorf("the counter is %d after %d commits", sum.counter, sum.committed))
	}
	return sum, errors.Join(append(failed, shutdown)...)
}

// retriedOnly exports the spans of calls that did not commit on their first
// attempt, each preceded by the spans of its fn. A span of fn ends before its
// call's span, which decides whether it is kept: until then it waits, by its
// parent's span ID.
type retriedOnly struct {
	sdktrace.SpanExporter

	mu       sync.Mutex
	children map[string][]sdktrace.ReadOnlySpan
}

func newRetriedOnly(e sdktrace.SpanExporter) *retriedOnly {
	return &retriedOnly{SpanExporter: e, children: map[string][]sdktrace.ReadOnlySpan{}}
}

func (r *retriedOnly) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	var keep []sdktrace.ReadOnlySpan
	r.mu.Lock()
	for _, s := range spans {
		if s.InstrumentationScope().Name != otelretry.ScopeName {
			parent := s.Parent().SpanID().String()
			r.children[parent] = append(r.children[parent], s)
			continue
		}
		id := s.SpanContext().SpanID().String()
		children := r.children[id]
		delete(r.children, id)
		if retried(s) {
			keep = append(append(keep, children...), s)
		}
	}
	r.mu.Unlock()
	if len(keep) == 0 {
		return nil
	}
	return r.SpanExporter.ExportSpans(ctx, keep)
}

// retried reports whether a call's span is of a call that did not commit on
// its first attempt.
func retried(s sdktrace.ReadOnlySpan) bool {
	for _, a := range s.Attributes() {
		if a.Key == otelretry.AttemptsKey && a.Value.AsInt64() > 1 || a.Key == otelretry.OutcomeKey && a.Value.AsString() != "committed" {
			return true
		}
	}
	return false
}
