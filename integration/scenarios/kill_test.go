package scenarios

import (
	"context"
	"errors"
	"testing"

	"github.com/txretry/txretry/txretry"
)

// TestBackendKilledInFn: the session is ended by an administrator
// (pg_terminate_backend / KILL) while fn is running, after fn wrote a row.
// fn's next statement fails; RunInTx returns that error without retrying (a
// lost connection before COMMIT is not retryable by default) and it is not
// ErrCommitUncertain, since COMMIT was never sent. Nothing is half applied,
// and the pool recovers: the next call succeeds.
func TestBackendKilledInFn(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, itemsDDL)
		sessions := make(chan int64, 1)
		killed := make(chan error, 1)
		go func() {
			select {
			case id := <-sessions:
				killed <- p.d.kill(ctx, p.admin, id)
			case <-ctx.Done():
				killed <- ctx.Err()
			}
		}()

		runs := 0
		err := p.run(ctx, func(ctx context.Context, q querier) error {
			runs++
			var id int64
			if err := q.queryRow(ctx, p.d.backendID).Scan(&id); err != nil {
				return err
			}
			if err := q.exec(ctx, "INSERT INTO items (id) VALUES ($1)", 11); err != nil {
				return err
			}
			if runs == 1 {
				sessions <- id
				if err := <-killed; err != nil {
					t.Errorf("kill session %d: %v", id, err)
				}
			}
			var one int
			return q.queryRow(ctx, "SELECT 1").Scan(&one)
		})
		t.Logf("RunInTx after the kill: %v", err)
		if err == nil {
			t.Fatal("RunInTx = nil after its session was killed")
		}
		if errors.Is(err, txretry.ErrCommitUncertain) || errors.Is(err, txretry.ErrRetriesExhausted) {
			t.Errorf("RunInTx = %v; want the connection error itself", err)
		}
		if runs != 1 {
			t.Errorf("fn ran %d times, want 1", runs)
		}
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM items"); n != 0 {
			t.Errorf("%d rows after the kill, want 0", n)
		}
		requireIdle(t, p)

		if err := p.run(ctx, func(ctx context.Context, q querier) error {
			return q.exec(ctx, "INSERT INTO items (id) VALUES ($1)", 12)
		}); err != nil {
			t.Fatalf("RunInTx after recovery: %v", err)
		}
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM items WHERE id = $1", 12); n != 1 {
			t.Errorf("%d rows from the call after the kill, want 1", n)
		}
	})
}
