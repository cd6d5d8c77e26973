package scenarios

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// Size of the bank scenario.
const (
	bankAccounts  = 10
	bankWorkers   = 32
	bankTransfers = 10 // per worker
	bankInitial   = 1000
	bankMaxAmount = 50
	// bankCallTimeout is the deadline of each transfer's call.
	bankCallTimeout = 5 * time.Second
)

// errInsufficientFunds is the domain error of a transfer the source account
// cannot cover.
var errInsufficientFunds = errors.New("insufficient funds")

// deadlineEnded reports whether err ended a call because the call's
// deadline passed (expired: its context had ended before it was
// cancelled). Drivers return the error of the statement the deadline cut
// as it is: the context's error, or for lib/pq its 57014 ("canceling
// statement due to user request") or driver.ErrBadConn, both seen in CI.
func deadlineEnded(err error, expired bool) bool {
	return errors.Is(err, context.DeadlineExceeded) || expired && err != nil
}

// transfer is one transfer, with its own id.
type transfer struct {
	id, src, dst, amount int
}

// TestBankTransfers: 32 workers make 10 transfers each between random
// pairs of 10 accounts, under SERIALIZABLE, each transfer recording its id
// in the transfers table in the same transaction. A call may fail only by
// exhaustion, by its deadline or by insufficient funds. Afterwards the
// total is unchanged, the transfers table holds exactly the transfers
// whose call succeeded, and every balance is its initial value plus the
// net of those transfers.
func TestBankTransfers(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		setupBank(t, ctx, p)

		var (
			mu       sync.Mutex
			done     = map[int]transfer{}
			failures = map[string]int{}
			attempts int
		)
		var wg sync.WaitGroup
		for w := range bankWorkers {
			wg.Go(func() {
				rnd := rand.New(rand.NewPCG(uint64(w), 42))
				for j := range bankTransfers {
					tr := transfer{id: w*bankTransfers + j, src: rnd.IntN(bankAccounts), amount: 1 + rnd.IntN(bankMaxAmount)}
					tr.dst = (tr.src + 1 + rnd.IntN(bankAccounts-1)) % bankAccounts
					callCtx, cancel := context.WithTimeout(ctx, bankCallTimeout)
					var n int
					err := p.run(callCtx, func(ctx context.Context, q querier) error {
						n = txretry.Attempt(ctx)
						return doTransfer(ctx, q, tr)
					}, txretry.WithIsolation(sql.LevelSerializable))
					expired := callCtx.Err() != nil
					cancel()

					mu.Lock()
					attempts += n
					switch {
					case err == nil:
						done[tr.id] = tr
					case errors.Is(err, txretry.ErrRetriesExhausted):
						failures["exhausted"]++
					case deadlineEnded(err, expired):
						failures["deadline"]++
					case errors.Is(err, errInsufficientFunds):
						failures["insufficient funds"]++
					default:
						failures["unexpected"]++
						t.Errorf("transfer %d: %v", tr.id, err)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		t.Logf("%d transfers committed, failures %v, %d attempts", len(done), failures, attempts)
		if len(done) == 0 {
			t.Fatal("no transfer committed")
		}

		applied := map[int]transfer{}
		if err := p.db.forEach(ctx, "SELECT id, src, dst, amount FROM transfers", nil, func(r row) error {
			var tr transfer
			err := r.Scan(&tr.id, &tr.src, &tr.dst, &tr.amount)
			applied[tr.id] = tr
			return err
		}); err != nil {
			t.Fatal(err)
		}
		want := make([]int, bankAccounts)
		for i := range want {
			want[i] = bankInitial
		}
		for id, tr := range done {
			if applied[id] != tr {
				t.Errorf("transfer %d reported done but recorded as %+v", id, applied[id])
			}
			want[tr.src] -= tr.amount
			want[tr.dst] += tr.amount
		}
		for id := range applied {
			if _, ok := done[id]; !ok {
				t.Errorf("transfer %d reported failed but applied", id)
			}
		}
		sum := 0
		if err := p.db.forEach(ctx, "SELECT id, balance FROM accounts", nil, func(r row) error {
			var id, balance int
			err := r.Scan(&id, &balance)
			sum += balance
			if err == nil && balance != want[id] {
				t.Errorf("account %d: balance %d, want %d from the applied transfers", id, balance, want[id])
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if sum != bankAccounts*bankInitial {
			t.Errorf("sum of balances = %d, want %d", sum, bankAccounts*bankInitial)
		}
	})
}

// doTransfer moves tr.amount from tr.src to tr.dst and records tr.
func doTransfer(ctx context.Context, q querier, tr transfer) error {
	var balance int
	if err := q.queryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", tr.src).Scan(&balance); err != nil {
		return err
	}
	if balance < tr.amount {
		return errInsufficientFunds
	}
	if err := q.exec(ctx, "UPDATE accounts SET balance = balance - $1 WHERE id = $2", tr.amount, tr.src); err != nil {
		return err
	}
	if err := q.exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", tr.amount, tr.dst); err != nil {
		return err
	}
	return q.exec(ctx, "INSERT INTO transfers (id, src, dst, amount) VALUES ($1, $2, $3, $4)", tr.id, tr.src, tr.dst, tr.amount)
}

// setupBank creates the bank's accounts, each with bankInitial, and an
// empty transfers table.
func setupBank(t *testing.T, ctx context.Context, p *driverPath) {
	t.Helper()
	p.setup(t, ctx,
		"CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL)",
		"CREATE TABLE transfers (id INT PRIMARY KEY, src INT NOT NULL, dst INT NOT NULL, amount INT NOT NULL)")
	for id := range bankAccounts {
		if err := p.db.exec(ctx, "INSERT INTO accounts (id, balance) VALUES ($1, $2)", id, bankInitial); err != nil {
			t.Fatal(err)
		}
	}
}
