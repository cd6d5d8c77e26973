package scenarios

import (
	"context"
	"testing"

	"github.com/txretry/txretry/txretry"
)

// TestNestedJoinsOuter: a RunInTx inside fn, with the ctx fn received and on
// the same pool, joins the outer transaction: the inner fn sees the outer's
// uncommitted row, on the same session, with the outer's attempt number
// (and, on database/sql, the very same *sql.Tx). Its error comes back to
// the outer fn unchanged, and only the outer call retries: with the inner
// fn failing with a retryable error on the first two attempts, outer and
// inner fn both run three times and the outer's row is committed once.
func TestNestedJoinsOuter(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, itemsDDL)
		var outerRuns, innerRuns int
		err := p.run(ctx, func(ctx context.Context, outer querier) error {
			outerRuns++
			attempt := txretry.Attempt(ctx)
			if err := outer.exec(ctx, "INSERT INTO items (id) VALUES ($1)", 9); err != nil {
				return err
			}
			var outerSession int64
			if err := outer.queryRow(ctx, p.d.backendID).Scan(&outerSession); err != nil {
				return err
			}
			var innerErr error
			err := p.run(ctx, func(ctx context.Context, inner querier) error {
				innerRuns++
				if got := txretry.Attempt(ctx); got != attempt {
					t.Errorf("inner fn sees attempt %d, want the outer's %d", got, attempt)
				}
				if p.sharesHandle && inner.handle() != outer.handle() {
					t.Errorf("inner fn got handle %p, want the outer's %p", inner.handle(), outer.handle())
				}
				var session int64
				if err := inner.queryRow(ctx, p.d.backendID).Scan(&session); err != nil {
					return err
				}
				if session != outerSession {
					t.Errorf("inner fn runs on session %d, want the outer's %d", session, outerSession)
				}
				var n int
				if err := inner.queryRow(ctx, "SELECT COUNT(*) FROM items WHERE id = $1", 9).Scan(&n); err != nil {
					return err
				}
				if n != 1 {
					t.Errorf("inner fn sees %d of the outer's uncommitted rows, want 1", n)
				}
				if attempt < 3 {
					innerErr = inner.exec(ctx, p.d.raiseRetryable)
					return innerErr
				}
				return nil
			})
			if err != innerErr {
				t.Errorf("nested RunInTx = %v; want the inner fn's error %v unchanged", err, innerErr)
			}
			return err
		})
		if err != nil {
			t.Fatalf("RunInTx: %v", err)
		}
		if outerRuns != 3 || innerRuns != 3 {
			t.Errorf("fn runs: outer %d, inner %d; want 3 and 3", outerRuns, innerRuns)
		}
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM items"); n != 1 {
			t.Errorf("%d rows, want 1", n)
		}
	})
}
