package gormretry

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/gorm"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
)

// RunInTx runs fn in a transaction on db's connection pool and commits it,
// re-running the whole transaction when the database reports a
// serialization failure or a deadlock, with the semantics and options of
// txretry.RunInTx. fn receives a *gorm.DB bound to the attempt's
// transaction and to fn's ctx (db's session settings kept); it must not
// commit or roll it back itself (txretry.ErrTxEndedByFn). A nil db or fn,
// a *gorm.DB not opened with gorm.Open, one that carries an error, or one
// whose ConnPool has no *sql.DB returns txretry.ErrInvalidOption.
func RunInTx(ctx context.Context, db *gorm.DB, fn func(ctx context.Context, tx *gorm.DB) error, opts ...txretry.Option) error {
	if fn == nil {
		return fmt.Errorf("%w: nil fn", txretry.ErrInvalidOption)
	}
	a, err := newAdapter(db, fn)
	if err != nil {
		return err
	}
	return txretry.Run(ctx, a, opts...)
}

// adapter runs GORM transactions in txretry's engine. The transaction is
// database/sql's own (*sql.Tx in txretry.SQLTx), begun on the pool under
// db, so that a call nested in txretry.RunInTx on the same pool, or one
// around it, joins it; Call binds a session of db to it.
type adapter struct {
	db     *gorm.DB
	pool   txretry.DB // *sql.DB or *sql.Conn; nil while db is in a transaction
	handle any        // the pool, also of a db in a transaction
	inTx   gorm.TxCommitter
	fn     func(ctx context.Context, tx *gorm.DB) error
}

var (
	_ txretry.AdapterHandle         = adapter{}
	_ txretry.AdapterSingleConn     = adapter{}
	_ txretry.AdapterCheckTxOptions = adapter{}
	_ txretry.AdapterFunc           = adapter{}
	_ txretry.AdapterLease          = adapter{}
	_ txretry.AdapterOverlapCommit  = adapter{}
)

func newAdapter(db *gorm.DB, fn func(ctx context.Context, tx *gorm.DB) error) (adapter, error) {
	if db == nil {
		return adapter{}, fmt.Errorf("%w: nil *gorm.DB", txretry.ErrInvalidOption)
	}
	if db.Config == nil || db.Statement == nil {
		return adapter{}, fmt.Errorf("%w: a *gorm.DB not opened with gorm.Open", txretry.ErrInvalidOption)
	}
	if db.Error != nil {
		return adapter{}, &carriedError{db.Error}
	}
	a := adapter{db: db, fn: fn}
	cp := connPool(db)
	if p, ok := cp.(*gorm.PreparedStmtDB); ok {
		cp = p.ConnPool
	}
	switch p := cp.(type) {
	case *sql.DB:
		if p == nil {
			break
		}
		a.pool, a.handle = p, p
	case *sql.Conn:
		if p == nil {
			break
		}
		a.pool, a.handle = p, p
	case gorm.TxCommitter:
		// A session already in a transaction (fn's tx, or one of GORM's
		// own): it may only join the call that began it.
		a.inTx = p
		if h, err := db.DB(); err == nil && h != nil {
			a.handle = h
		}
	default:
		if h, err := db.DB(); err == nil && h != nil { // a plugin's ConnPool (GetDBConn)
			a.pool, a.handle = h, h
		}
	}
	if a.handle == nil {
		return adapter{}, fmt.Errorf("%w: the *gorm.DB's ConnPool (%T) leads to no *sql.DB", txretry.ErrInvalidOption, cp)
	}
	return a, nil
}

func connPool(db *gorm.DB) gorm.ConnPool {
	if db.Statement.ConnPool != nil {
		return db.Statement.ConnPool
	}
	return db.ConnPool
}

func (a adapter) Begin(ctx context.Context, o txretry.TxOptions) (*txretry.SQLTx[*sql.Tx], error) {
	if a.pool == nil {
		return nil, fmt.Errorf("%w: the *gorm.DB is in a transaction: RunInTx on it only joins the call that began that transaction, with the context that call's fn received", txretry.ErrInvalidOption)
	}
	return txretry.BeginSQLOn(ctx, a.pool, o, func(ctx context.Context) (*sql.Tx, error) {
		return a.pool.BeginTx(ctx, &sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly})
	})
}

// CheckTxOptions accepts txretry.WithLockTimeout where txretry.RunInTx
// does: on a pool of pgx's stdlib driver, lib/pq or go-sql-driver/mysql.
func (a adapter) CheckTxOptions(o txretry.TxOptions) error {
	pool, _ := a.handle.(txretry.DB) // also for a session in a transaction
	return txretry.CheckSQLTxOptions(pool, o)
}

// Call hands fn a session of db on the attempt's transaction, as GORM's
// Begin makes one: the Statement's ConnPool becomes the transaction (under
// GORM's prepared-statement cache when db uses one).
func (a adapter) Call(ctx context.Context, tx *txretry.SQLTx[*sql.Tx]) error {
	if a.inTx != nil {
		if !sameTx(a.inTx, tx.Tx) {
			return fmt.Errorf("%w: the *gorm.DB is bound to another transaction than the enclosing call's", txretry.ErrInvalidOption)
		}
		return a.fn(ctx, a.db.WithContext(ctx))
	}
	return a.fn(ctx, onTx(ctx, a.db, tx.Tx))
}

// onTx returns a session of db, which is in no transaction, on tx and ctx:
// a new Statement, so db is left as it was.
func onTx(ctx context.Context, db *gorm.DB, tx *sql.Tx) *gorm.DB {
	s := db.WithContext(ctx)
	switch p := s.Statement.ConnPool.(type) {
	case *gorm.PreparedStmtDB:
		s.Statement.ConnPool = &gorm.PreparedStmtTX{Tx: tx, PreparedStmtDB: p}
	default:
		s.Statement.ConnPool = tx
	}
	return s
}

func sameTx(c gorm.TxCommitter, tx *sql.Tx) bool {
	switch p := c.(type) {
	case *sql.Tx:
		return p == tx
	case *gorm.PreparedStmtTX:
		t, ok := p.Tx.(*sql.Tx)
		return ok && t == tx
	}
	return false
}

// Handle is the connection pool (the *sql.DB, or the *sql.Conn GORM was
// opened on): the same for every Session, WithContext and transaction of
// one gorm.Open, and the same as txretry.RunInTx's on that pool.
func (a adapter) Handle() any { return a.handle }

// Func is the caller's fn.
func (a adapter) Func() any { return a.fn }

// Lease lets the processes that share a conflict domain take turns on it
// through a lock in the database, as txretry.RunInTx's calls do (see
// txretry.LeaseSQL); a pool of one *sql.Conn cannot lease.
func (a adapter) Lease(ctx context.Context, key string) (func(), error) {
	pool, ok := a.handle.(*sql.DB)
	if !ok {
		return nil, fmt.Errorf("%w: gormretry leases on a *sql.DB, not on a %T", txretry.ErrInvalidOption, a.handle)
	}
	return txretry.LeaseSQL(ctx, pool, key)
}

// OverlapCommit reports MySQL or MariaDB (see txretry.OverlapCommitSQL).
func (a adapter) OverlapCommit() bool {
	pool, ok := a.handle.(*sql.DB)
	return ok && txretry.OverlapCommitSQL(pool)
}

func (a adapter) SingleConn() bool {
	_, ok := a.pool.(*sql.Conn)
	return ok
}

// carriedError is a *gorm.DB's earlier error, described without its text,
// which may quote row data.
type carriedError struct{ err error }

func (e *carriedError) Error() string {
	d := fmt.Sprintf("%T", e.err)
	if pgerr.SQLState(e.err) != "" {
		d = txretry.Describe(e.err)
	} else if _, ok := mysqlerr.Number(e.err); ok {
		d = txretry.Describe(e.err)
	}
	return txretry.ErrInvalidOption.Error() + ": the *gorm.DB carries an earlier error: " + d
}

func (e *carriedError) Unwrap() []error { return []error{txretry.ErrInvalidOption, e.err} }
