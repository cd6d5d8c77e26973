package otelretry_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/otelretry"
	"github.com/txretry/txretry/txretry/slogretry"
)

// server is a database of the local test servers, found through an
// environment variable; under CI=true a missing one fails the test.
type server struct {
	name, env, driver string
	conflict          string // the code of a lost race under SERIALIZABLE
}

var servers = []server{
	{name: "postgres", env: "TXRETRY_PG_DSN", driver: "pgx", conflict: "40001"},
	{name: "mysql", env: "TXRETRY_MYSQL_DSN", driver: "mysql", conflict: "1213"},
}

// open connects to s and returns the pool and the db.system.name value.
func (s server) open(t *testing.T) (*sql.DB, string) {
	t.Helper()
	dsn := os.Getenv(s.env)
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set; CI needs a %s server", s.env, s.name)
		}
		t.Skipf("%s is not set", s.env)
	}
	db, err := sql.Open(s.driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", s.name, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.driver == "pgx" {
		if err := db.PingContext(ctx); err != nil {
			t.Fatalf("ping %s: %v", s.name, err)
		}
		return db, "postgresql"
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatalf("ping %s: %v", s.name, err)
	}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		return db, "mariadb"
	}
	return db, "mysql"
}

// table creates a table whose name is unique to the test and drops it when
// the test ends.
func table(t *testing.T, db *sql.DB, prefix, columns string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+name+" ("+columns+")"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+name) })
	return name
}

func placeholder(driver string, n int) string {
	if driver == "pgx" {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// TestContendedRun has 8 workers increment one row under SERIALIZABLE, all
// on one context, and checks that every call and every lost race is
// accounted for, and that the statements' spans are children of their
// call's span.
func TestContendedRun(t *testing.T) {
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			db, system := s.open(t)
			db.SetMaxOpenConns(16)
			hot := table(t, db, "otelretry_hot", "id INT PRIMARY KEY, v INT NOT NULL")
			if _, err := db.Exec("INSERT INTO " + hot + " (id, v) VALUES (1, 0)"); err != nil {
				t.Fatalf("insert: %v", err)
			}
			h := newHarness(t, otelretry.WithDBSystem(system))
			app := h.tp.Tracer("app")
			increment := func(ctx context.Context, tx *sql.Tx) error {
				ctx, stmt := app.Start(ctx, "increment statements")
				defer stmt.End()
				var v int
				if err := tx.QueryRowContext(ctx, "SELECT v FROM "+hot+" WHERE id = 1").Scan(&v); err != nil {
					return err
				}
				time.Sleep(time.Millisecond) // widen the race
				_, err := tx.ExecContext(ctx, "UPDATE "+hot+" SET v = "+placeholder(s.driver, 1)+" WHERE id = 1", v+1)
				return err
			}

			const workers, perWorker = 8, 10
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range perWorker {
						err := txretry.RunInTx(ctx, db, increment, txretry.WithObserver(h.obs),
							txretry.WithLabel("increment"), txretry.WithIsolation(sql.LevelSerializable),
							txretry.WithMaxAttempts(1000))
						if err != nil {
							t.Errorf("RunInTx: %s", txretry.Describe(err))
							return
						}
					}
				})
			}
			wg.Wait()

			var v int
			if err := db.QueryRow("SELECT v FROM " + hot + " WHERE id = 1").Scan(&v); err != nil {
				t.Fatalf("select: %v", err)
			}
			const calls = workers * perWorker
			if v != calls {
				t.Errorf("v = %d after %d increments", v, calls)
			}
			op := otelretry.DBOperationNameKey.String("increment")
			sys := otelretry.DBSystemNameKey.String(system)
			if got := h.counter(t, "txretry.calls", sys, op, otelretry.OutcomeKey.String("committed")); got != calls {
				t.Errorf("txretry.calls{committed} = %d, want %d", got, calls)
			}
			conflicts := h.counter(t, "txretry.attempt.failures", sys, op,
				otelretry.ClassKey.String("retryable"), otelretry.DBResponseStatusCodeKey.String(s.conflict))
			// Under load a few retries may follow the lock timeout the
			// manager arms (55P03) or a deadlock: retryable too.
			retryable := h.counter(t, "txretry.attempt.failures", sys, op, otelretry.ClassKey.String("retryable"))
			retries := h.counter(t, "txretry.retries", sys, op)
			if conflicts == 0 || retries != retryable {
				t.Errorf("%d retryable failures (%d with code %s) and %d retries; want as many, some %s",
					retryable, conflicts, s.conflict, retries, s.conflict)
			}
			if other := h.counter(t, "txretry.attempt.failures") - retryable; other != 0 {
				t.Errorf("%d failures not retryable", other)
			}

			var callSpans, stmtSpans tracetest.SpanStubs
			for _, sp := range h.spans.GetSpans() {
				if sp.Name == "txretry increment" {
					callSpans = append(callSpans, sp)
				} else {
					stmtSpans = append(stmtSpans, sp)
				}
			}
			if len(callSpans) != calls {
				t.Fatalf("%d call spans, want %d", len(callSpans), calls)
			}
			var failedEvents, startedEvents int64
			ids := make(map[trace.SpanID]bool, calls)
			for _, sp := range callSpans {
				ids[sp.SpanContext.SpanID()] = true
				var started, failed int
				for _, e := range sp.Events {
					switch e.Name {
					case otelretry.EventAttemptStarted:
						started++
					case otelretry.EventAttemptFailed:
						failed++
					}
				}
				if started != failed+1 {
					t.Errorf("span with %d attempts started and %d failed, want one success", started, failed)
				}
				failedEvents += int64(failed)
				startedEvents += int64(started)
			}
			if failedEvents != retryable {
				t.Errorf("%d attempt.failed span events, want %d", failedEvents, retryable)
			}
			// fn runs once per attempt, and its spans are children of its
			// own call's span.
			if int64(len(stmtSpans)) != startedEvents {
				t.Errorf("%d statement spans, want one per attempt (%d)", len(stmtSpans), startedEvents)
			}
			for _, sp := range stmtSpans {
				if !ids[sp.Parent.SpanID()] {
					t.Errorf("statement span's parent %v is not a call span", sp.Parent.SpanID())
					break
				}
			}
			queue := h.histogram(t, "txretry.queue.duration", sys, op, otelretry.OutcomeKey.String("committed"))
			if queue.Count != calls {
				t.Errorf("txretry.queue.duration has %d values, want %d", queue.Count, calls)
			}
			t.Logf("%s: %d calls, %d conflicts (%s), %.3fs queued in all", system, calls, conflicts, s.conflict, queue.Sum)
		})
	}
}

const marker = "MARKER-7d1f"

// TestNoMessageText checks that no error message, row value or argument
// reaches a log line, a span or a metric: every error of the run below
// carries the marker in its message or detail.
func TestNoMessageText(t *testing.T) {
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			db, system := s.open(t)
			uniq := table(t, db, "otelretry_uniq", "k VARCHAR(64) PRIMARY KEY")
			// A retryable error whose message carries the marker.
			var raise string
			if s.driver == "pgx" {
				raise = "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = '" + marker + "'; END $$"
			} else {
				proc := fmt.Sprintf("otelretry_raise_%d", time.Now().UnixNano())
				if _, err := db.Exec("CREATE PROCEDURE " + proc + "() SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = '" + marker + "'"); err != nil {
					t.Fatalf("create procedure: %v", err)
				}
				t.Cleanup(func() { _, _ = db.Exec("DROP PROCEDURE " + proc) })
				raise = "CALL " + proc + "()"
			}

			h := newHarness(t, otelretry.WithDBSystem(system))
			var logs bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			opts := []txretry.Option{
				txretry.WithObserver(h.obs), txretry.WithObserver(slogretry.New(logger)),
				txretry.WithLabel("insert"), txretry.WithBackoff(txretry.Constant(0)),
			}
			insert := func(ctx context.Context, tx *sql.Tx) error {
				if txretry.Attempt(ctx) == 1 {
					if _, err := tx.ExecContext(ctx, raise); err != nil {
						return err
					}
				}
				_, err := tx.ExecContext(ctx, "INSERT INTO "+uniq+" (k) VALUES ("+placeholder(s.driver, 1)+")", marker)
				return err
			}
			ctx := context.Background()
			if err := txretry.RunInTx(ctx, db, insert, opts...); err != nil {
				t.Fatalf("first insert: %s", txretry.Describe(err))
			}
			err := txretry.RunInTx(ctx, db, insert, opts...)
			// The error itself carries the marker: the test is not vacuous.
			var pgErr *pgconn.PgError
			var myErr *mysql.MySQLError
			switch {
			case errors.As(err, &pgErr):
				if pgErr.Code != "23505" || !strings.Contains(pgErr.Detail, marker) {
					t.Fatalf("second insert: %v (detail %q), want a unique violation naming the marker", err, pgErr.Detail)
				}
			case errors.As(err, &myErr):
				if myErr.Number != 1062 || !strings.Contains(myErr.Message, marker) {
					t.Fatalf("second insert: %v, want a duplicate entry naming the marker", err)
				}
			default:
				t.Fatalf("second insert: %v, want a unique violation", err)
			}

			dup := map[string]string{"pgx": "23505", "mysql": "1062"}[s.driver]
			if got := h.counter(t, "txretry.attempt.failures", otelretry.DBResponseStatusCodeKey.String(dup)); got != 1 {
				t.Errorf("%d failures with code %s, want 1", got, dup)
			}
			if got := h.counter(t, "txretry.attempt.failures", otelretry.DBResponseStatusCodeKey.String(s.conflict)); got != 2 {
				t.Errorf("%d failures with code %s, want 2", got, s.conflict)
			}
			recorded := strings.Join(h.metrics(t), "\n") + "\n" + strings.Join(h.spanLines(), "\n") + "\n" + logs.String()
			if strings.Contains(recorded, marker) {
				t.Errorf("the marker reached the telemetry:\n%s", recorded)
			}
			for _, sp := range h.spans.GetSpans() {
				if strings.Contains(fmt.Sprintf("%+v", sp), marker) {
					t.Errorf("the marker reached a span: %+v", sp)
				}
			}
		})
	}
}
