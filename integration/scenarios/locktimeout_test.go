package scenarios

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
)

// TestLockTimeoutEndsADeadlockEarly is the recipe of txretry/contention.md
// for PostgreSQL transactions that can deadlock. PostgreSQL looks for a
// deadlock only after deadlock_timeout (1 s by default, set so here for the
// transaction), and until then both transactions hold their rows, past a
// caller's deadline of a second; with SET LOCAL lock_timeout as fn's first
// statement and WithRetryOn(pgerr.IsLockNotAvailable), the party whose lock
// wait runs out first fails with 55P03 instead, is retried, and both calls
// commit once each. (Party 1 waits longer than party 0, so that party 0 is
// the only victim: with equal timeouts both may run out together, and both
// be retried, which is fine in use but not in this harness, where a retry
// waits for the other call.)
func TestLockTimeoutEndsADeadlockEarly(t *testing.T) {
	forEachPath(t, postgresPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, crossLockDDL...)
		c := newCrossLock(false)
		var ev events
		errs := c.pair.run(func(i int) error {
			fn := c.fn(p.d, i)
			return p.run(ctx, func(ctx context.Context, q querier) error {
				if err := q.exec(ctx, "SET LOCAL deadlock_timeout = '1s'"); err != nil {
					return err
				}
				if err := q.exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", 50+450*i)); err != nil {
					return err
				}
				return fn(ctx, q)
			}, ev.option(), txretry.WithRetryOn(pgerr.IsLockNotAvailable))
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("RunInTx: %v", err)
		}
		failed := ev.of(txretry.AttemptFailed)
		if len(failed) != 1 || failed[0].Code != "55P03" || failed[0].Class != txretry.Retryable || failed[0].Attempt != 1 {
			t.Errorf("failed attempts = %+v; want one retryable 55P03 (lock_timeout), not a deadlock found after deadlock_timeout", failed)
		}
		if v, w := c.runs[0].Load(), c.runs[1].Load(); v != 2 || w != 1 {
			t.Errorf("fn runs: %d and %d; want 2 (party 0, the victim) and 1", v, w)
		}
		c.checkApplied(t, ctx, p)
	})
}
