package pgxretry

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/txretry/internal/dblock"
)

// Lease holds the exclusive advisory lock of key on a connection of the
// pool's own, for the contention manager (see txretry.AdapterLease).
func (a adapter) Lease(ctx context.Context, key string) (func(), error) {
	p, ok := a.db.(*pgxpool.Pool)
	if !ok || p.Stat().AcquiredConns()+2 > p.Stat().MaxConns() {
		return nil, dblock.ErrNoLease // the lease and the attempt need a connection each
	}
	pc, err := p.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return dblock.Lock(ctx, lockConn{pc}, dblock.Postgres, pc.Conn().PgConn().PID(), key)
}

// lockConn is the connection a lease is held on.
type lockConn struct{ pc *pgxpool.Conn }

func (c lockConn) Row(ctx context.Context, query string) (a, b int64, err error) {
	var n *int64
	err = c.pc.QueryRow(ctx, query).Scan(&n, &b)
	if n == nil {
		return -1, b, err
	}
	return *n, b, err
}

func (c lockConn) Discard() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = c.pc.Conn().Close(ctx)
	cancel()
	c.pc.Release()
}

func (c lockConn) Done() { c.pc.Release() }
