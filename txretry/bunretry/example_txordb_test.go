package bunretry_test

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/txretry/txretry/txretry/bunretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

func ExampleTxOrDB() {
	drv := &fakedb.Driver{}
	db := bun.NewDB(drv.DB(), pgdialect.New()) // in real code: sql.Open("pgx", dsn)
	defer db.Close()
	ctx := context.Background()

	fmt.Println("outside a call, db:", bunretry.TxOrDB(ctx, db) == db)
	err := bunretry.RunInTx(ctx, db, func(ctx context.Context, tx bun.Tx) error {
		got, ok := bunretry.TxOrDB(ctx, db).(bun.Tx)
		fmt.Println("in fn, fn's tx:", ok && got.Tx == tx.Tx)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// outside a call, db: true
	// in fn, fn's tx: true
	// err: <nil>
}
