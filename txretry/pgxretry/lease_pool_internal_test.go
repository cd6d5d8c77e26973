package pgxretry

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/txretry/internal/dbtest"
)

// The lease waits for a connection of a pool whose connections are all
// acquired, within its context, instead of refusing (see txretry's
// TestSQLLeaseWaitsForABusyPool); the pool's leases never hold its last
// connection: a pool of one is refused, and so is a second lease on a pool
// of two until the first is given back.
func TestLeaseWaitsForABusyPool(t *testing.T) {
	dsn := dbtest.Postgres.AdminDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, size := range []int32{2, 1} {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = size
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var busy []*pgxpool.Conn
		for range size {
			c, err := p.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			busy = append(busy, c)
		}
		var freed atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(50 * time.Millisecond)
			freed.Store(true)
			busy[0].Release()
		}()
		release, err := adapter{db: p}.Lease(ctx, "pgxretry-leasepool")
		switch {
		case size == 1 && err == nil:
			release()
			t.Error("a lease on a pool of one connection was had")
		case size == 1 && ctx.Err() != nil:
			t.Errorf("a pool of one connection: %v after waiting out the context; want refused at once", err)
		case size > 1 && err != nil:
			t.Errorf("lease on a busy pool: %v; want it had once a connection is free", err)
		case size > 1:
			if !freed.Load() {
				t.Error("the lease was had before any connection was free")
			}
			if second, err := (adapter{db: p}).Lease(ctx, "pgxretry-leasepool-other"); err == nil {
				second()
				t.Error("two leases held both connections of a pool of 2")
			} else if ctx.Err() != nil {
				t.Errorf("a second lease on a pool of 2: %v after waiting out the context; want refused at once", err)
			}
			release()
			second, err := adapter{db: p}.Lease(ctx, "pgxretry-leasepool-other")
			if err != nil {
				t.Fatalf("a lease once the other was given back: %v", err)
			}
			second()
		}
		<-done
		for _, c := range busy[1:] {
			c.Release()
		}
		if n := p.Stat().AcquiredConns(); n != 0 {
			t.Errorf("pool of %d: %d connection(s) still acquired", size, n)
		}
		p.Close()
	}
}
