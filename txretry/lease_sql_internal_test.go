package txretry

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry/internal/dblock"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// The database/sql lease waits for a connection no longer than its
// context (the manager's cmLeaseWait within the caller's deadline): a pool
// with none free does not hold the lease's caller past it.
func TestSQLLeaseWaitsForAConnectionWithinItsContext(t *testing.T) {
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	db.SetMaxOpenConns(1)
	busy, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if release, err := leaseOn(ctx, db, dblock.Postgres, "k"); !errors.Is(err, context.DeadlineExceeded) || release != nil {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
}

// The lease gives its lock back with a ROLLBACK bounded like a COMMIT, and
// a connection whose ROLLBACK fails leaves the pool (its session, and any
// lock it holds, ends); one whose ROLLBACK succeeds goes back to the pool.
func TestSQLLeaseEndsWithABoundedRollback(t *testing.T) {
	for _, fail := range []bool{false, true} {
		var mu sync.Mutex
		var deadline time.Time
		drv := &fakedb.Driver{
			OnQuery: func(context.Context, int, string, []driver.NamedValue) ([]string, [][]driver.Value, error) {
				return []string{"n"}, [][]driver.Value{{int64(1)}}, nil
			},
			OnExec: func(ctx context.Context, _ int, q string, _ []driver.NamedValue) error {
				if q == "ROLLBACK" {
					mu.Lock()
					deadline, _ = ctx.Deadline()
					mu.Unlock()
					if fail {
						return errors.New("connection reset")
					}
				}
				return nil
			},
		}
		db := drv.DB()
		release, err := leaseOn(context.Background(), db, dblock.Postgres, "k")
		if err != nil {
			t.Fatal(err)
		}
		release()
		if log := strings.Join(drv.Log(), "; "); !strings.Contains(log, "exec BEGIN") || !strings.Contains(log, "pg_advisory_xact_lock") {
			t.Fatalf("statements %s, want BEGIN and the lock", log)
		}
		mu.Lock()
		left := time.Until(deadline)
		mu.Unlock()
		if left <= 0 || left > DefaultCommitTimeout {
			t.Fatalf("ROLLBACK's deadline %v away, want within %v", left, DefaultCommitTimeout)
		}
		if open := drv.Stats().OpenConns; open != map[bool]int{false: 1, true: 0}[fail] {
			t.Fatalf("rollback failed: %v; %d connection(s) open afterwards", fail, open)
		}
		db.Close()
	}
}
