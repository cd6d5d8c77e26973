package engines

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// TestPgBouncerHotDomainGoesWithoutALease shows that the contention
// manager's lease stays off behind PgBouncer in transaction pooling mode,
// where a session advisory lock would stay on a server session that the
// next client borrows, held by nobody. Two pools through PgBouncer stand
// for two replicas whose transfers between two accounts conflict, which
// makes their domain want a lease. PgBouncer announces a backend process id
// of its own at startup, and the lease's lock statement locks only when
// pg_backend_pid() is that id: no lock is ever taken, the domain goes
// without a lease, and every call commits. (Had the statement locked
// anyway, a lock left on a server session would hold the next lease's
// takers until their 250 ms wait ends, and stay in pg_locks.)
func TestPgBouncerHotDomainGoesWithoutALease(t *testing.T) {
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
			for w := range 8 {
				run := runs[w%2]
				wg.Go(func() {
					for i := range 10 {
						m := transfer{from: 1 + (w+i)%2, to: 1 + (w+i+1)%2, amount: 1}
						// The first attempts of all eight workers meet at
						// once, before the domain is known to conflict, and
						// wait out PostgreSQL's deadlock detection (1 s) in
						// turn: one took 3 s on a quiet machine, over 5 s in
						// CI. After an attempt that long, a 10 s deadline
						// leaves no room for another as long, and the loop
						// stops (reason "deadline"); 30 s does.
						cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
						err := run(cctx, m, txretry.WithIsolation(sql.LevelSerializable), txretry.WithLabel("bouncer-hot"))
						ccancel()
						if err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
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

// advisoryLocks counts the advisory locks held in the test's database,
// read directly from the server.
func (b *bouncer) advisoryLocks(t *testing.T) int {
	t.Helper()
	return b.scalar(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
}
