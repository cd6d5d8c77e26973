package bunretry_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/bunretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// The scripted fake driver stands in for PostgreSQL here: its first COMMIT
// fails with a serialization failure, as PostgreSQL's does under
// SERIALIZABLE, and the whole transaction runs again.
func ExampleRunInTx() {
	drv := &fakedb.Driver{OnCommit: func(n int) error {
		if n == 1 {
			return &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
		}
		return nil
	}}
	// In real code: sql.Open("pgx", dsn), or pgdriver.NewConnector.
	db := bun.NewDB(drv.DB(), pgdialect.New())
	defer db.Close()

	err := bunretry.RunInTx(context.Background(), db, func(ctx context.Context, tx bun.Tx) error {
		fmt.Println("attempt", txretry.Attempt(ctx))
		_, err := tx.NewRaw("UPDATE accounts SET balance = balance - ? WHERE id = ?", 10, 1).Exec(ctx)
		return err
	}, txretry.WithIsolation(sql.LevelSerializable))
	fmt.Println("err:", err)
	// Output:
	// attempt 1
	// attempt 2
	// err: <nil>
}
