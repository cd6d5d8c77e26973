package sqlxretry

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/txretry/txretry/txretry"
)

// RunInTx runs fn in a transaction on db and commits it, re-running the
// whole transaction when the database reports a serialization failure or a
// deadlock, with the semantics and options of txretry.RunInTx. fn must not
// commit or roll back tx itself (txretry.ErrTxEndedByFn). A nil db or fn
// returns txretry.ErrInvalidOption.
func RunInTx(ctx context.Context, db *sqlx.DB, fn func(ctx context.Context, tx *sqlx.Tx) error, opts ...txretry.Option) error {
	if db == nil || db.DB == nil {
		return fmt.Errorf("%w: nil *sqlx.DB", txretry.ErrInvalidOption)
	}
	if fn == nil {
		return fmt.Errorf("%w: nil fn", txretry.ErrInvalidOption)
	}
	return txretry.Run(ctx, adapter{db: db, fn: fn}, opts...)
}

// adapter runs sqlx transactions in txretry's engine. Its Handle gives
// each pool its default contention manager and lets nested calls join.
type adapter struct {
	db *sqlx.DB
	fn func(ctx context.Context, tx *sqlx.Tx) error
}

var (
	_ txretry.AdapterHandle         = adapter{}
	_ txretry.AdapterCheckTxOptions = adapter{}
	_ txretry.AdapterFunc           = adapter{}
	_ txretry.AdapterLease          = adapter{}
	_ txretry.AdapterOverlapCommit  = adapter{}
)

func (a adapter) Begin(ctx context.Context, o txretry.TxOptions) (*txretry.SQLTx[*sqlx.Tx], error) {
	return txretry.BeginSQLOn(ctx, a.db.DB, o, func(ctx context.Context) (*sqlx.Tx, error) {
		return a.db.BeginTxx(ctx, &sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly})
	})
}

// CheckTxOptions accepts txretry.WithLockTimeout where txretry.RunInTx
// does: on pgx's stdlib driver, lib/pq and go-sql-driver/mysql.
func (a adapter) CheckTxOptions(o txretry.TxOptions) error {
	return txretry.CheckSQLTxOptions(a.db.DB, o)
}

func (a adapter) Call(ctx context.Context, tx *txretry.SQLTx[*sqlx.Tx]) error {
	return a.fn(ctx, tx.Tx)
}

// Lease lets the processes that share a conflict domain take turns on it
// through a lock in the database, as txretry.RunInTx's calls do (see
// txretry.LeaseSQL).
func (a adapter) Lease(ctx context.Context, key string) (func(), error) {
	return txretry.LeaseSQL(ctx, a.db.DB, key)
}

// OverlapCommit reports MySQL or MariaDB (see txretry.OverlapCommitSQL).
func (a adapter) OverlapCommit() bool { return txretry.OverlapCommitSQL(a.db.DB) }

// Handle is the *sql.DB under db: the same for db and its copies
// (Unsafe, or another sqlx.NewDb on the pool), which share one pool.
func (a adapter) Handle() any { return a.db.DB }

// Func is the caller's fn.
func (a adapter) Func() any { return a.fn }
