package pgxretry

import (
	"context"
	"errors"
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
	if _, err := txOptions(o); err != nil {
		return nil, err
	}
	var c lockConn
	var err error
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
	at, err := keylock.Begin(ctx, l, func(ctx context.Context) (*attempt, error) {
		return adapter{db: c.conn}.Begin(ctx, o)
	}, func(ctx context.Context, at *attempt, query string) (s int64, err error) {
		err = at.tx.QueryRow(ctx, query).Scan(&s)
		return
	})
	if err != nil {
		return nil, err
	}
	at.locks = l
	return at, nil
}

// errNoLease: the handle cannot lease now; the domain goes without.
var errNoLease = errors.New("txretry: no lease on this handle")

// Lease holds the exclusive advisory lock of key on a connection of the
// pool's own, for the contention manager (see txretry.AdapterLease).
func (a adapter) Lease(ctx context.Context, key string) (func(), error) {
	p, ok := a.db.(*pgxpool.Pool)
	if !ok || p.Stat().AcquiredConns()+2 > p.Stat().MaxConns() {
		return nil, errNoLease // the lease and the attempt need a connection each
	}
	var c lockConn
	var err error
	if c.pc, err = p.Acquire(ctx); err != nil {
		return nil, err
	}
	c.conn = c.pc.Conn()
	l := &keylock.Locks{Conn: c, Dialect: keylock.Postgres, IDs: keylock.IDs([]string{key}), Base: txretry.ErrInvalidOption,
		PID: c.conn.PgConn().PID()}
	if err := l.Lock(ctx); err != nil {
		return nil, err
	}
	return func() { _ = l.Release(context.Background(), txretry.DefaultCommitTimeout) }, nil
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
