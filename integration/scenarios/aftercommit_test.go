package scenarios

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/txretry/txretry/txretry"
)

// errVetoed is the domain error of a transfer that fn refuses after its
// statements, as a validation at the end of a transaction would.
var errVetoed = errors.New("vetoed")

// TestAfterCommitOncePerCommittedCall: the bank scenario's contention (32
// workers, 10 accounts, SERIALIZABLE), with every attempt registering an
// after-commit hook, and every fifth transfer refused by fn after its
// statements. The hooks run exactly once for each call that returned nil,
// from its last attempt, before the call returned, and never for a call
// that failed; the transfers table holds exactly the calls whose hook ran.
// Some committed calls must have been retried, so that hooks of rolled-back
// attempts were there to be dropped.
func TestAfterCommitOncePerCommittedCall(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		setupBank(t, ctx, p)

		var (
			mu                        sync.Mutex
			committed                 = map[int]bool{}
			calls, failed             int
			retriedOK, retriedFailed  int // calls of more than one attempt
			hooksOK, hooksForFailures int
		)
		var wg sync.WaitGroup
		for w := range bankWorkers {
			wg.Go(func() {
				rnd := rand.New(rand.NewPCG(uint64(w), 7))
				for j := range bankTransfers {
					tr := transfer{id: w*bankTransfers + j, src: rnd.IntN(bankAccounts), amount: 1 + rnd.IntN(bankMaxAmount)}
					tr.dst = (tr.src + 1 + rnd.IntN(bankAccounts-1)) % bankAccounts
					callCtx, cancel := context.WithTimeout(ctx, bankCallTimeout)
					attempts, ran, ranAttempt := 0, 0, 0
					err := p.run(callCtx, func(ctx context.Context, q querier) error {
						n := txretry.Attempt(ctx)
						attempts = n
						txretry.AfterCommit(ctx, func(context.Context) { ran, ranAttempt = ran+1, n })
						if err := doTransfer(ctx, q, tr); err != nil {
							return err
						}
						if tr.id%5 == 0 {
							return errVetoed
						}
						return nil
					}, txretry.WithIsolation(sql.LevelSerializable))
					expired := callCtx.Err() != nil
					cancel()

					mu.Lock()
					calls++
					switch {
					case err == nil:
						committed[tr.id] = true
						hooksOK += ran
						if ran != 1 || ranAttempt != attempts {
							t.Errorf("transfer %d committed at attempt %d: its hooks ran %d time(s), last from attempt %d", tr.id, attempts, ran, ranAttempt)
						}
						if attempts > 1 {
							retriedOK++
						}
					default:
						failed++
						hooksForFailures += ran
						if ran != 0 {
							t.Errorf("transfer %d failed (%v): its hooks ran %d time(s)", tr.id, err, ran)
						}
						if attempts > 1 {
							retriedFailed++
						}
						if !errors.Is(err, errVetoed) && !errors.Is(err, errInsufficientFunds) &&
							!errors.Is(err, txretry.ErrRetriesExhausted) && !deadlineEnded(err, expired) {
							t.Errorf("transfer %d: %v", tr.id, err)
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		t.Logf("%s: %d calls: %d committed (%d retried), hooks run %d; %d failed (%d retried), hooks run %d",
			p.name, calls, len(committed), retriedOK, hooksOK, failed, retriedFailed, hooksForFailures)
		if retriedOK == 0 {
			t.Fatal("no committed call was retried: the test proved nothing about dropped hooks")
		}
		if failed == 0 {
			t.Fatal("no call failed")
		}

		applied := 0
		if err := p.db.forEach(ctx, "SELECT id, src, dst, amount FROM transfers", nil, func(r row) error {
			var tr transfer
			err := r.Scan(&tr.id, &tr.src, &tr.dst, &tr.amount)
			if err == nil && !committed[tr.id] {
				t.Errorf("transfer %d applied, but its call failed", tr.id)
			}
			applied++
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if applied != len(committed) {
			t.Errorf("%d transfers applied, %d calls committed", applied, len(committed))
		}
	})
}
