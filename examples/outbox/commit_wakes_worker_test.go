package main

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/txretry"
)

// TestCommitWakesWorker checks that the commit of Enqueue wakes a worker
// that waits for work (Serve), through txretry.AfterCommit: the worker
// polls only every hour, yet each job is delivered well within the test's
// timeout. The second job is enqueued inside a caller's transaction, as the
// outbox pattern has it: the worker is woken when that transaction commits
// (woken before, it would find no job and sleep for the hour).
func TestCommitWakesWorker(t *testing.T) {
	for _, e := range []dbserver.Engine{dbserver.Postgres, dbserver.MySQL} {
		t.Run(e.String(), func(t *testing.T) {
			ctx, db, q := testQueue(t, e, "txretry_test_outbox_wake")
			if err := q.Setup(ctx); err != nil {
				t.Fatal(err)
			}
			waiting := make(chan struct{}, 8)
			q.waiting = func() { waiting <- struct{}{} }
			delivered := make(chan Job, 8)
			q.Done = func(j Job) { delivered <- j }
			serveCtx, stop := context.WithCancel(ctx)
			served := make(chan error, 1)
			go func() {
				stats, err := q.Serve(serveCtx, 1, time.Hour)
				if err == nil && stats.Processed != 2 {
					t.Errorf("Serve processed %d jobs, want 2", stats.Processed)
				}
				served <- err
			}()

			// await waits for c, and awaitJob for the delivery of job id;
			// 30s is generous, an hour is not.
			await := func(what string, c <-chan struct{}) {
				t.Helper()
				select {
				case <-c:
				case <-time.After(30 * time.Second):
					t.Fatalf("%s within 30s (the worker polls every hour)", what)
				}
			}
			awaitJob := func(id int64) {
				t.Helper()
				select {
				case j := <-delivered:
					if j.ID != id {
						t.Errorf("delivered job %d, want %d", j.ID, id)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("job %d not delivered within 30s of its commit: the commit did not wake the worker, which polls every hour", id)
				}
			}

			await("the worker did not wait for work", waiting)
			if err := q.Enqueue(ctx, 1, []Payload{{Order: 1}}); err != nil {
				t.Fatal(err)
			}
			awaitJob(1)

			await("the worker did not wait for work again", waiting)
			err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
				return q.Enqueue(ctx, 2, []Payload{{Order: 2}}) // joins this transaction
			})
			if err != nil {
				t.Fatal(err)
			}
			awaitJob(2)

			stop()
			if err := <-served; err != nil {
				t.Errorf("Serve = %v, want nil once its context ended", err)
			}
		})
	}
}
