package scenarios

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// Replicas whose calls of one kind conflict with each other take turns on
// it through a database lease, with the default options: the lease is
// held while they run, every call commits exactly once, and once they are
// done no lease stays held and no connection stays in use.
func TestHotDomainLeasedAcrossReplicas(t *testing.T) {
	const replicas, workers, calls = 4, 4, 40
	// The lease's lock name for the domain of the label "lease-hot"
	// (domainKey and takeLease in package txretry).
	const leaseKey = "\x00domain\x00label:lease-hot"
	forEachReplicaKind(t, func(t *testing.T, k replicaKind) {
		dsn, paths := replicaPaths(t, k, replicas)
		ctx := testContext(t)
		paths[0].setup(t, ctx,
			"CREATE TABLE lease_hot (id INT PRIMARY KEY, n BIGINT NOT NULL)",
			"INSERT INTO lease_hot VALUES (1, 0)")
		w := newLockWatch(t, k, dsn)
		hot := func(ctx context.Context, q querier) error {
			var n int64
			if err := q.queryRow(ctx, "SELECT n FROM lease_hot WHERE id = 1").Scan(&n); err != nil {
				return err
			}
			return q.exec(ctx, "UPDATE lease_hot SET n = $1 WHERE id = 1", n+1)
		}
		var fails failures
		var failed, outOfTime atomic.Int64
		var wg sync.WaitGroup
		for _, p := range paths {
			for range workers {
				wg.Go(func() {
					for range calls {
						// Calls of 1.5 s: once the domain's spacing
						// reaches its 1 s cap, more than half their time,
						// its gate closes and the replicas lease. Under
						// load a few run out of time: they are counted,
						// not failed (at most 1 in 10), whatever error
						// the cut brought (lib/pq: a bad connection).
						cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
						err := p.run(cctx, hot, txretry.WithIsolation(sql.LevelSerializable), txretry.WithLabel("lease-hot"), fails.option())
						late := cctx.Err() != nil
						cancel()
						switch {
						case err != nil && (late || errors.Is(err, txretry.ErrRetriesExhausted)):
							outOfTime.Add(1)
							failed.Add(1)
						case err != nil:
							failed.Add(1)
							t.Errorf("call failed: %v", err)
						}
					}
				})
			}
		}
		seen := make(chan bool, 1)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					seen <- false
					return
				default:
				}
				if n, err := w.held(ctx, leaseKey); err == nil && n == 1 {
					seen <- true
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		wg.Wait()
		close(stop)
		if !<-seen {
			t.Error("no replica ever held the domain's lease")
		}
		if n := outOfTime.Load(); n*10 > replicas*workers*calls {
			t.Errorf("%d of %d calls ran out of time", n, replicas*workers*calls)
		}
		if n := paths[0].count(t, ctx, "SELECT n FROM lease_hot WHERE id = 1"); n != replicas*workers*calls-int(failed.Load()) {
			t.Errorf("hot row counted %d increments, want %d", n, replicas*workers*calls-int(failed.Load()))
		}
		w.requireHeld(t, ctx, 0, leaseKey)
		for i, p := range paths {
			if n := p.inUse(); n != 0 {
				t.Errorf("replica %d: %d connections still in use", i, n)
			}
		}
		t.Logf("%d replicas x %d workers x %d calls, %d out of time, %d retryable failures %v", replicas, workers, calls, outOfTime.Load(), fails.n.Load(), fails.codes)
	})
}

// One process whose kinds of transaction conflict with each other (two
// labels updating one row) takes no database lock: their conflicts come
// from the process itself, not from another one, and a lease would only
// add a transaction to every turn.
func TestKindsOfOneProcessTakeNoLease(t *testing.T) {
	const workers, calls = 8, 40
	keys := []string{"\x00domain\x00label:kind-a", "\x00domain\x00label:kind-b"}
	forEachReplicaKind(t, func(t *testing.T, k replicaKind) {
		dsn, paths := replicaPaths(t, k, 1)
		p := paths[0]
		ctx := testContext(t)
		p.setup(t, ctx,
			"CREATE TABLE kinds_hot (id INT PRIMARY KEY, n BIGINT NOT NULL)",
			"INSERT INTO kinds_hot VALUES (1, 0)")
		w := newLockWatch(t, k, dsn)
		hot := func(ctx context.Context, q querier) error {
			var n int64
			if err := q.queryRow(ctx, "SELECT n FROM kinds_hot WHERE id = 1").Scan(&n); err != nil {
				return err
			}
			return q.exec(ctx, "UPDATE kinds_hot SET n = $1 WHERE id = 1", n+1)
		}
		var fails failures
		var wg sync.WaitGroup
		for i := range 2 * workers {
			label := []string{"kind-a", "kind-b"}[i%2]
			wg.Go(func() {
				for range calls {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					if err := p.run(cctx, hot, txretry.WithIsolation(sql.LevelSerializable), txretry.WithLabel(label), fails.option()); err != nil {
						t.Errorf("call failed: %v", err)
					}
					cancel()
				}
			})
		}
		held := make(chan bool, 1)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					held <- false
					return
				default:
				}
				if n, err := w.held(ctx, keys...); err == nil && n > 0 {
					held <- true
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		wg.Wait()
		close(stop)
		if <-held {
			t.Error("a domain of the only process took a database lock for conflicts with its own process's other kind")
		}
		if n := p.count(t, ctx, "SELECT n FROM kinds_hot WHERE id = 1"); n != 2*workers*calls {
			t.Errorf("row counted %d increments, want %d", n, 2*workers*calls)
		}
		t.Logf("%d retryable failures %v", fails.n.Load(), fails.codes)
	})
}
