package pgxretry_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txretry/txretry/txretry/pgxretry"
)

// In real code db is a *pgxpool.Pool or a *pgx.Conn, and a repository
// built by sqlc takes pgxretry.TxOrDB(ctx, db): store.New(pgxretry.TxOrDB(ctx, db)).
func ExampleTxOrDB() {
	db := &standInPool{}
	ctx := context.Background()

	fmt.Println("outside a call, db:", pgxretry.TxOrDB(ctx, db) == db)
	err := pgxretry.RunInTx(ctx, db, func(ctx context.Context, tx pgx.Tx) error {
		fmt.Println("in fn, fn's tx:", pgxretry.TxOrDB(ctx, db) == tx)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// outside a call, db: true
	// in fn, fn's tx: true
	// err: <nil>
}

// standInPool stands in for a *pgxpool.Pool: it begins transactions that
// commit. The embedded interface stands for the statements, unused here.
type standInPool struct{ pgxretry.DBTX }

func (*standInPool) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) {
	return committingTx{}, nil
}

type committingTx struct{ pgx.Tx }

func (committingTx) Commit(context.Context) error   { return nil }
func (committingTx) Rollback(context.Context) error { return nil }
