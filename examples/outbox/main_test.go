package main

import (
	"bytes"
	"context"
	"database/sql"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/dbserver/dbservertest"
)

func TestMain(m *testing.M) { dbservertest.Main(m) }

// TestOutbox runs the queue on every reachable server: the dead letters get
// their reasons and attempts, the alert fires for each, and reprocessing
// moves them back to the queue (failing again with the processor unfixed,
// processed once it is fixed).
func TestOutbox(t *testing.T) {
	for _, e := range []dbserver.Engine{dbserver.Postgres, dbserver.MySQL} {
		t.Run(e.String(), func(t *testing.T) {
			ctx, _, q := testQueue(t, e, "txretry_test_outbox")
			q.MaxAttempts = 3
			var mu sync.Mutex
			var alerts []DeadLetter
			q.Alert = func(dl DeadLetter) {
				mu.Lock()
				defer mu.Unlock()
				alerts = append(alerts, dl)
			}
			if err := q.Setup(ctx); err != nil {
				t.Fatal(err)
			}
			const jobs, rejects, poison = 30, 2, 2
			if err := q.Enqueue(ctx, 1, payloads(jobs, rejects, poison)); err != nil {
				t.Fatal(err)
			}

			stats, err := q.Work(ctx, 4)
			if err != nil {
				t.Fatal(err)
			}
			if stats.Processed != jobs-rejects-poison || stats.DeadLetters != rejects+poison {
				t.Errorf("stats = %+v, want %d processed and %d dead letters", stats, jobs-rejects-poison, rejects+poison)
			}
			dead, err := q.DeadLetters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(dead) != rejects+poison || len(alerts) != len(dead) {
				t.Fatalf("%d dead letters and %d alerts, want %d of each", len(dead), len(alerts), rejects+poison)
			}
			code := map[dbserver.Engine]string{dbserver.Postgres: "40001", dbserver.MySQL: "1213"}[e]
			correlations := map[int64]string{}
			for _, dl := range dead {
				correlations[dl.ID] = dl.CorrelationID
				if dl.CorrelationID == "" || dl.Payload == "" {
					t.Errorf("dead letter %d lacks its correlation id or payload: %+v", dl.ID, dl)
				}
				switch {
				case strings.Contains(dl.Payload, simulatePoison):
					if !strings.HasPrefix(dl.Reason, "retries exhausted (attempt limit) after 3 attempts") || !strings.Contains(dl.Reason, code) {
						t.Errorf("poison job %d: reason %q, want retries exhausted after 3 attempts with %s", dl.ID, dl.Reason, code)
					}
					if len(dl.Attempts) < q.MaxAttempts {
						t.Errorf("poison job %d: %d attempts recorded, want at least %d", dl.ID, len(dl.Attempts), q.MaxAttempts)
					}
					for _, a := range dl.Attempts {
						if a.Class != "retryable" || a.Code != code || a.Type == "" || a.Worker == 0 {
							t.Errorf("poison job %d: attempt %+v, want retryable %s with a type and a worker", dl.ID, a, code)
						}
					}
				case strings.Contains(dl.Payload, simulateReject):
					if dl.Reason != "rejected: simulated permanent failure" {
						t.Errorf("rejected job %d: reason %q", dl.ID, dl.Reason)
					}
					if len(dl.Attempts) == 0 || dl.Attempts[0].Class != "permanent" || !strings.Contains(dl.Attempts[0].Type, "RejectedError") {
						t.Errorf("rejected job %d: attempts %+v, want a permanent RejectedError", dl.ID, dl.Attempts)
					}
				default:
					t.Errorf("job %d dead-lettered although its payload %s asks for nothing", dl.ID, dl.Payload)
				}
			}

			// Reprocess one, with the processor unfixed: it fails again
			// and comes back with the same correlation id.
			one := dead[0].ID
			if n, err := q.Reprocess(ctx, one); err != nil || n != 1 {
				t.Fatalf("Reprocess(%d) = %d, %v; want 1", one, n, err)
			}
			if queued, _, deadCount, err := q.Counts(ctx); err != nil || queued != 1 || deadCount != len(dead)-1 {
				t.Fatalf("after Reprocess: %d queued, %d dead, %v; want 1 and %d", queued, deadCount, err, len(dead)-1)
			}
			if stats, err := q.Work(ctx, 2); err != nil || stats.DeadLetters != 1 {
				t.Fatalf("work after reprocessing unfixed = %+v, %v; want the job dead again", stats, err)
			}
			again, err := q.DeadLetters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if i := slices.IndexFunc(again, func(dl DeadLetter) bool { return dl.ID == one }); i < 0 || again[i].CorrelationID != correlations[one] {
				t.Errorf("job %d after reprocessing: %+v, want it dead again with correlation %s", one, again, correlations[one])
			}

			// Reprocess all with the processor fixed: all processed.
			q.Fixed = true
			if n, err := q.Reprocess(ctx); err != nil || n != len(dead) {
				t.Fatalf("Reprocess() = %d, %v; want %d", n, err, len(dead))
			}
			if stats, err := q.Work(ctx, 4); err != nil || stats.Processed != len(dead) || stats.DeadLetters != 0 {
				t.Fatalf("work after fixed reprocess = %+v, %v; want %d processed", stats, err, len(dead))
			}
			queued, processed, deadCount, err := q.Counts(ctx)
			if err != nil || queued != 0 || processed != jobs || deadCount != 0 {
				t.Errorf("end: %d queued, %d processed, %d dead, %v; want 0, %d, 0", queued, processed, deadCount, err, jobs)
			}
		})
	}
}

// TestRun runs the program's two commands as a user would, when the servers
// come from the environment.
func TestRun(t *testing.T) {
	srv := dbservertest.EnvServer(t, dbserver.Postgres)
	ns := dbservertest.Namespace(t, srv, "txretry_test_outbox_run")
	for _, args := range [][]string{
		{"run", "-db", "postgres", "-namespace", ns.Name, "-jobs", "12", "-workers", "3"},
		{"reprocess", "-db", "postgres", "-namespace", ns.Name},
	} {
		var out bytes.Buffer
		code := run(args, &out, &out)
		t.Logf("%q:\n%s", args, out.String())
		if code != 0 {
			t.Errorf("run(%q) = %d, want 0", args, code)
		}
	}
}

func TestCondense(t *testing.T) {
	records := []AttemptRecord{
		{Worker: 1, Attempt: 1, Class: "retryable", Code: "40001", Type: "*pgconn.PgError"},
		{Worker: 1, Attempt: 2, Class: "retryable", Code: "40001", Type: "*pgconn.PgError"},
		{Worker: 3, Attempt: 1, Class: "retryable", Code: "40001", Type: "*pgconn.PgError"},
		{Worker: 3, Attempt: 2, Class: "permanent", Type: "*main.RejectedError"},
	}
	want := "3× retryable 40001 *pgconn.PgError (workers 1, 3); 1× permanent *main.RejectedError (worker 3)"
	if got := condense(records); got != want {
		t.Errorf("condense = %q, want %q", got, want)
	}
}

func TestFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"unknown command", []string{"drain"}, 2},
		{"reprocess has no -jobs", []string{"reprocess", "-jobs", "3"}, 2},
		{"too many specials", []string{"-jobs", "2", "-rejects", "2", "-poison", "1"}, 2},
		{"bad db", []string{"-db", "sqlite"}, 2},
		{"help", []string{"reprocess", "-h"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if got := run(tt.args, &out, &out); got != tt.want {
				t.Errorf("run(%q) = %d, want %d; output:\n%s", tt.args, got, tt.want, out.String())
			}
		})
	}
}

// testQueue returns a Queue on a namespace of e's test server, its pool,
// and a context of a minute for the test; the pool is closed when t ends.
func testQueue(t *testing.T, e dbserver.Engine, namespace string) (context.Context, *sql.DB, *Queue) {
	t.Helper()
	srv := dbservertest.Server(t, e)
	ns := dbservertest.Namespace(t, srv, namespace)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db, err := sql.Open(e.Driver(), ns.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return ctx, db, NewQueue(db, ns)
}
