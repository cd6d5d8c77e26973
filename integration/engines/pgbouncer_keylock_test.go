package engines

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// TestPgBouncerRefusesDatabaseKeyLocks shows that WithDatabaseKeyLocks
// refuses PgBouncer in transaction pooling mode, where session advisory
// locks cannot work: PgBouncer lends a server session per transaction, so a
// lock statement (a transaction of its own) would leave its lock on a
// server session that the next client borrows, held by nobody. PgBouncer
// announces a backend process id of its own at startup, and the lock
// statement locks only when pg_backend_pid() is that id: through PgBouncer
// no lock is ever taken, and every call fails at its first attempt, before
// fn, with an error that matches ErrInvalidOption and names PgBouncer. (An
// earlier version that compared the process ids only after locking left
// locks on PgBouncer's server sessions, and most calls then waited for
// them until their deadline.)
func TestPgBouncerRefusesDatabaseKeyLocks(t *testing.T) {
	checkLeaks(t)
	b := newBouncer(t)
	b.createBank(t, 4, 1000)
	for _, ad := range adapters {
		t.Run(ad.name, func(t *testing.T) {
			run := ad.open(t, b.dsn("default_query_exec_mode", "exec"))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var mu sync.Mutex
			var committed, refused int
			var other []error
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := range 5 {
						from := 1 + (w+i)%4
						m := transfer{from: from, to: 1 + from%4, amount: 1}
						cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
						err := run(cctx, m, txretry.WithIsolation(sql.LevelSerializable), txretry.WithDatabaseKeyLocks(),
							txretry.WithContentionKeys(fmt.Sprint("a", m.from), fmt.Sprint("a", m.to)))
						ccancel()
						mu.Lock()
						switch {
						case err == nil:
							committed++
						case errors.Is(err, txretry.ErrInvalidOption) && strings.Contains(err.Error(), "PgBouncer in transaction pooling mode"):
							refused++
						default:
							other = append(other, err)
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			t.Logf("40 calls: %d committed, %d refused, %d other errors", committed, refused, len(other))
			for _, err := range other[:min(len(other), 3)] {
				t.Errorf("other error: %v", err)
			}
			if refused != 40 {
				t.Errorf("%d of 40 calls refused, want all", refused)
			}
			for i, bal := range b.balances(t) {
				if bal != 1000 {
					t.Errorf("account %d holds %d: a refused call changed data", i+1, bal)
				}
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
