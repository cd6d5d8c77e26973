package txretry_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/dbtest"
)

// A pool whose connections are all in use makes LeaseSQL wait for one,
// within its context, as an attempt's BEGIN would: a pool sized to the
// workers and kept busy by other domains' transactions would otherwise
// leave a hot domain unleased (txbench mixed, 4 processes: 1.8 attempts a
// hot commit refusing, 1.4 waiting). The pool's leases never hold its
// last connection: a lease that would is refused at once, so that leased
// attempts of two domains cannot each hold one and wait for the other's.
func TestSQLLeaseWaitsForABusyPool(t *testing.T) {
	dbtest.ForEach(t, "leasepool", func(t *testing.T, _ dbtest.Engine, db *sql.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		db.SetMaxOpenConns(2)
		var busy [2]*sql.Conn
		for i := range busy {
			c, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			busy[i] = c
		}
		var freed atomic.Bool
		go func() {
			time.Sleep(50 * time.Millisecond)
			freed.Store(true)
			_ = busy[0].Close()
		}()
		release, err := txretry.LeaseSQL(ctx, db, "leasepool")
		if err != nil {
			t.Fatalf("lease on a busy pool: %v; want it had once a connection is free", err)
		}
		if !freed.Load() {
			t.Error("the lease was had before any connection was free")
		}
		release()
		_ = busy[1].Close()

		first, err := txretry.LeaseSQL(ctx, db, "leasepool")
		if err != nil {
			t.Fatal(err)
		}
		if second, err := txretry.LeaseSQL(ctx, db, "leasepool-other"); err == nil {
			second()
			t.Error("two leases held both connections of a pool of 2")
		} else if ctx.Err() != nil {
			t.Errorf("a second lease on a pool of 2: %v after waiting out the context; want refused at once", err)
		}
		first()
		second, err := txretry.LeaseSQL(ctx, db, "leasepool-other")
		if err != nil {
			t.Fatalf("a lease once the other was given back: %v", err)
		}
		second()

		db.SetMaxOpenConns(1)
		release, err = txretry.LeaseSQL(ctx, db, "leasepool")
		if err == nil {
			release()
			t.Fatal("a lease on a pool of one connection was had")
		}
		if ctx.Err() != nil {
			t.Fatalf("a pool of one connection: %v after waiting out the context; want refused at once", err)
		}
	})
}
