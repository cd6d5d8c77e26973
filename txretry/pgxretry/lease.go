package pgxretry

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/txretry/internal/dblock"
)

// Lease holds the exclusive advisory lock of key in a transaction of its
// own on the pool, for the contention manager (see txretry.AdapterLease).
// A pool with no connection free is waited for within ctx; the pool's
// leases never hold its last connection (refused), which lets leased
// attempts BEGIN.
func (a adapter) Lease(ctx context.Context, key string) (func(), error) {
	p, ok := a.db.(*pgxpool.Pool)
	if !ok {
		return nil, dblock.ErrNoLease
	}
	give, ok := dblock.Reserve(p, int(p.Stat().MaxConns()))
	if !ok {
		return nil, dblock.ErrNoLease
	}
	tx, err := p.Begin(ctx) // within ctx: the pool's wait too
	if err != nil {
		give()
		return nil, err
	}
	return dblock.Lock(ctx, dblock.Postgres, key, func(ctx context.Context, q string) (n int64, err error) {
		err = tx.QueryRow(ctx, q).Scan(&n)
		return n, err
	}, func(bool) { // pgx closes a connection whose rollback fails; the lock is the transaction's
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = tx.Rollback(ctx)
		give()
	})
}
