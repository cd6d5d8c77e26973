package pgxretry

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/txretry/internal/dblock"
)

// Lease holds the exclusive advisory lock of key in a transaction of its
// own on the pool, for the contention manager (see txretry.AdapterLease).
func (a adapter) Lease(ctx context.Context, key string) (func(), error) {
	p, ok := a.db.(*pgxpool.Pool)
	if !ok || p.Stat().AcquiredConns()+2 > p.Stat().MaxConns() {
		return nil, dblock.ErrNoLease // the lease and the attempt need a connection each
	}
	tx, err := p.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return dblock.Lock(ctx, lockTx{tx}, dblock.Postgres, key)
}

// lockTx is the transaction a lease is held in.
type lockTx struct{ tx pgx.Tx }

func (t lockTx) Int(ctx context.Context, query string) (n int64, err error) {
	err = t.tx.QueryRow(ctx, query).Scan(&n)
	return n, err
}

// End rolls back; pgx closes a connection whose rollback fails.
func (t lockTx) End() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = t.tx.Rollback(ctx)
}
