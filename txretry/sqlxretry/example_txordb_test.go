package sqlxretry_test

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/sqlxretry"
)

func ExampleTxOrDB() {
	drv := &fakedb.Driver{}
	db := sqlx.NewDb(drv.DB(), "mysql") // in real code: sqlx.Open("mysql", dsn)
	defer db.Close()
	ctx := context.Background()

	fmt.Println("outside a call, db:", sqlxretry.TxOrDB(ctx, db) == db)
	err := sqlxretry.RunInTx(ctx, db, func(ctx context.Context, tx *sqlx.Tx) error {
		fmt.Println("in fn, fn's tx:", sqlxretry.TxOrDB(ctx, db) == tx)
		// A repository method on the pool's other *sqlx.DB finds it too.
		fmt.Println("in fn, on db.Unsafe():", sqlxretry.TxOrDB(ctx, db.Unsafe()) == tx)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// outside a call, db: true
	// in fn, fn's tx: true
	// in fn, on db.Unsafe(): true
	// err: <nil>
}
