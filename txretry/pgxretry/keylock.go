package pgxretry

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/keylock"
)

// CheckKeyLocks accepts txretry.WithDatabaseKeyLocks on a *pgxpool.Pool or
// a *pgx.Conn.
func (a adapter) CheckKeyLocks() error {
	switch a.db.(type) {
	case *pgxpool.Pool, *pgx.Conn:
		return nil
	}
	return fmt.Errorf("%w: WithDatabaseKeyLocks needs a *pgxpool.Pool or *pgx.Conn, not a %T", txretry.ErrInvalidOption, a.db)
}

// BeginLocked takes the keys' advisory locks on one connection (a pool's
// is acquired for the attempt) and begins the transaction on it; the
// transaction's end releases them (see txretry.WithDatabaseKeyLocks).
func (a adapter) BeginLocked(ctx context.Context, o txretry.TxOptions, keys []string) (*attempt, error) {
	opts, err := txOptions(o)
	if err != nil {
		return nil, err
	}
	var c lockConn
	switch h := a.db.(type) {
	case *pgxpool.Pool:
		if c.pc, err = h.Acquire(ctx); err != nil {
			return nil, err
		}
		c.conn = c.pc.Conn()
	case *pgx.Conn:
		c.conn = h
	default:
		return nil, a.CheckKeyLocks()
	}
	l := &keylock.Locks{Conn: c, Dialect: keylock.Postgres, IDs: keylock.IDs(keys), Base: txretry.ErrInvalidOption,
		PID: c.conn.PgConn().PID()}
	if err := l.Lock(ctx); err != nil {
		return nil, err
	}
	tx, err := c.conn.BeginTx(ctx, opts)
	if err == nil && l.NeedsTxCheck() {
		var s int64
		if err = tx.QueryRow(ctx, keylock.SessionQuery(keylock.Postgres)).Scan(&s); err == nil {
			err = l.CheckTx(s)
		}
		if err != nil {
			rctx, cancel := shielded(ctx, txretry.DefaultCommitTimeout)
			_ = tx.Rollback(rctx)
			cancel()
		}
	}
	if err != nil {
		l.Abandon(ctx)
		return nil, err
	}
	return &attempt{tx: tx, locks: l}, nil
}

// lockConn is the connection of an attempt's locks.
type lockConn struct {
	pc   *pgxpool.Conn // acquired from a pool for the attempt; nil for a *pgx.Conn
	conn *pgx.Conn
}

func (c lockConn) Row(ctx context.Context, query string) (a, b int64, err error) {
	var n *int64
	err = c.conn.QueryRow(ctx, query).Scan(&n, &b)
	if n == nil {
		return -1, b, err
	}
	return *n, b, err
}

func (c lockConn) Owned() bool { return c.pc != nil }

func (c lockConn) Discard() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = c.conn.Close(ctx)
	cancel()
	c.pc.Release()
}

func (c lockConn) Done() { c.pc.Release() }
