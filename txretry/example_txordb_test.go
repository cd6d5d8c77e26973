package txretry_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// rename is a repository method: it runs in the caller's transaction when
// there is one, on db otherwise. With sqlc: store.New(txretry.TxOrDB(ctx, db)).
func rename(ctx context.Context, db *sql.DB, id int, name string) error {
	_, err := txretry.TxOrDB(ctx, db).ExecContext(ctx, "UPDATE users SET name = $1 WHERE id = $2", name, id)
	return err
}

func ExampleTxOrDB() {
	drv := &fakedb.Driver{}
	db := drv.DB() // in real code: sql.Open("pgx", dsn) or sql.Open("mysql", dsn)
	defer db.Close()
	ctx := context.Background()

	fmt.Println("outside a call, db:", txretry.TxOrDB(ctx, db) == db)
	err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		fmt.Println("in fn, fn's tx:", txretry.TxOrDB(ctx, db) == tx)
		return rename(ctx, db, 1, "ada")
	})
	fmt.Println("err:", err, "transactions:", drv.Stats().Begins)
	// Output:
	// outside a call, db: true
	// in fn, fn's tx: true
	// err: <nil> transactions: 1
}
