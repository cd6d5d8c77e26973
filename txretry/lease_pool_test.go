package txretry_test

import (
	"context"
	"database/sql"
	"testing"

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
		dbtest.LeasesWaitForBusyPool(t, func(_ *testing.T, size int) dbtest.Pool {
			db.SetMaxOpenConns(size)
			return dbtest.Pool{
				Hold: func(ctx context.Context) (func(), error) {
					c, err := db.Conn(ctx)
					if err != nil {
						return nil, err
					}
					return func() { _ = c.Close() }, nil
				},
				Lease: func(ctx context.Context, key string) (func(), error) {
					return txretry.LeaseSQL(ctx, db, key)
				},
			}
		})
	})
}
