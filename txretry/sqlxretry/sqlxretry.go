// Package sqlxretry runs sqlx transactions with txretry: the same engine,
// options and semantics as txretry.RunInTx, with fn receiving a *sqlx.Tx.
// It is its own module, so that users of txretry alone never get sqlx in
// their module graph, and it is built on txretry's exported Run, Adapter
// and SQLTx only.
//
//	err := sqlxretry.RunInTx(ctx, db, func(ctx context.Context, tx *sqlx.Tx) error {
//		var balance int
//		if err := tx.GetContext(ctx, &balance, tx.Rebind("SELECT balance FROM accounts WHERE id = ?"), from); err != nil {
//			return err
//		}
//		_, err := tx.ExecContext(ctx, tx.Rebind("UPDATE accounts SET balance = ? WHERE id = ?"), balance-amount, from)
//		return err
//	}, txretry.WithIsolation(sql.LevelSerializable))
//
// Each *sqlx.DB has its own default txretry.ContentionManager
// (txretry.ManagerFor), so WithContentionKeys applies per handle; a call
// inside fn with fn's context on the same *sqlx.DB joins the outer
// transaction.
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
	if db == nil {
		return fmt.Errorf("%w: nil *sqlx.DB", txretry.ErrInvalidOption)
	}
	if fn == nil {
		return fmt.Errorf("%w: nil fn", txretry.ErrInvalidOption)
	}
	return txretry.Run(ctx, adapter{db: db, fn: fn}, opts...)
}

// adapter runs sqlx transactions in txretry's engine. Its Handle gives
// each *sqlx.DB its default contention manager and lets nested calls join.
type adapter struct {
	db *sqlx.DB
	fn func(ctx context.Context, tx *sqlx.Tx) error
}

func (a adapter) Begin(ctx context.Context, o txretry.TxOptions) (*txretry.SQLTx[*sqlx.Tx], error) {
	return txretry.BeginSQL(ctx, func(ctx context.Context) (*sqlx.Tx, error) {
		return a.db.BeginTxx(ctx, &sql.TxOptions{Isolation: o.Isolation, ReadOnly: o.ReadOnly})
	})
}

func (a adapter) Call(ctx context.Context, tx *txretry.SQLTx[*sqlx.Tx]) error {
	return a.fn(ctx, tx.Tx)
}

func (a adapter) Handle() any { return a.db }
