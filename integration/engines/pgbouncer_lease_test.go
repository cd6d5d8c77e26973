package engines

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txretry/txretry/txretry"
)

// TestPgBouncerHotDomainLeasedThroughThePooler shows that the contention
// manager's lease works behind PgBouncer in transaction pooling mode: its
// lock is PostgreSQL's transaction-scoped advisory lock, held in a
// transaction of its own, so it lives on one server session for exactly
// as long as that transaction and cannot stay behind on a session that the
// next client borrows. Two pools through PgBouncer stand for two replicas
// whose transfers between two accounts conflict, which makes their domain
// take turns through the lease: the lease's lock is seen held while they
// run, the balances add up, and no lock is left afterwards.
func TestPgBouncerHotDomainLeasedThroughThePooler(t *testing.T) {
	checkLeaks(t)
	b := newBouncer(t)
	b.createBank(t, 2, 1000)
	for _, ad := range adapters {
		t.Run(ad.name, func(t *testing.T) {
			runs := []runner{ad.open(t, b.dsn("default_query_exec_mode", "exec")), ad.open(t, b.dsn("default_query_exec_mode", "exec"))}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var mu sync.Mutex
			var errs []error
			var wg sync.WaitGroup
			seen := b.watchAdvisoryLocks(t, ctx)
			for w := range 8 {
				run := runs[w%2]
				wg.Go(func() {
					for i := range 10 {
						m := transfer{from: 1 + (w+i)%2, to: 1 + (w+i+1)%2, amount: 1}
						// The first attempts of all eight workers meet at
						// once and may wait out PostgreSQL's deadlock
						// detection (1 s) in turn: the first call of each
						// worker has 30 s. The later ones have 1.9 s: once
						// the domain's spacing reaches its 1 s cap, more
						// than half their time, its gate closes and the
						// replicas lease. One of those may still run out
						// of time behind a deadlock wait under load: that
						// is logged, not failed.
						d := 1900 * time.Millisecond
						if i == 0 {
							d = 30 * time.Second
						}
						cctx, ccancel := context.WithTimeout(ctx, d)
						err := run(cctx, m, txretry.WithIsolation(sql.LevelSerializable), txretry.WithLabel("bouncer-hot"))
						ccancel()
						if i > 0 && (errors.Is(err, txretry.ErrRetriesExhausted) || errors.Is(err, context.DeadlineExceeded)) {
							t.Logf("call ran out of time: %v", err)
							err = nil
						}
						if err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			if !seen() {
				t.Error("no replica ever held the domain's lease")
			}
			for _, err := range errs[:min(len(errs), 3)] {
				t.Errorf("call failed: %v", err)
			}
			if bal := b.balances(t); bal[0]+bal[1] != 2000 {
				t.Errorf("balances %v do not add up to 2000", bal)
			}
			if n := b.advisoryLocks(t); n != 0 {
				t.Errorf("%d advisory lock(s) left on PgBouncer's server sessions", n)
			}
		})
	}
}

// watchAdvisoryLocks polls the server directly for a granted advisory lock
// in the test's database until ctx ends or the returned function is
// called, which reports whether one was seen.
func (b *bouncer) watchAdvisoryLocks(t *testing.T, ctx context.Context) (seen func() bool) {
	t.Helper()
	conn, err := pgx.Connect(ctx, b.direct)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	stop := make(chan struct{})
	found := make(chan bool, 1)
	go func() {
		defer conn.Close(context.Background())
		for {
			var n int
			err := conn.QueryRow(ctx, advisoryLocksQuery).Scan(&n)
			select {
			case <-stop:
				found <- false
				return
			default:
			}
			if err == nil && n > 0 {
				found <- true
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return func() bool {
		close(stop)
		return <-found
	}
}

const advisoryLocksQuery = `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// advisoryLocks counts the advisory locks held in the test's database,
// read directly from the server.
func (b *bouncer) advisoryLocks(t *testing.T) int {
	t.Helper()
	return b.scalar(t, advisoryLocksQuery)
}
