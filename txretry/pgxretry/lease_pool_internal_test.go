package pgxretry

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/txretry/internal/dbtest"
)

// The lease waits for a connection of a pool whose connections are all
// acquired, within its context, instead of refusing (see txretry's
// TestSQLLeaseWaitsForABusyPool); the pool's leases never hold its last
// connection.
func TestLeaseWaitsForABusyPool(t *testing.T) {
	dsn := dbtest.Postgres.AdminDSN(t)
	dbtest.LeasesWaitForBusyPool(t, func(t *testing.T, size int) dbtest.Pool {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = int32(size)
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if n := p.Stat().AcquiredConns(); n != 0 {
				t.Errorf("pool of %d: %d connection(s) still acquired", size, n)
			}
			p.Close()
		})
		return dbtest.Pool{
			Hold: func(ctx context.Context) (func(), error) {
				c, err := p.Acquire(ctx)
				if err != nil {
					return nil, err
				}
				return c.Release, nil
			},
			Lease: func(ctx context.Context, key string) (func(), error) {
				return adapter{db: p}.Lease(ctx, key)
			},
		}
	})
}
