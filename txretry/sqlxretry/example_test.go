package sqlxretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/sqlxretry"
)

// The scripted fake driver stands in for MariaDB here: the first UPDATE is
// chosen as a deadlock victim (error 1213), and the whole transaction runs
// again.
func ExampleRunInTx() {
	drv := &fakedb.Driver{OnExec: func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
		if n == 1 {
			return &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock"}
		}
		return nil
	}}
	db := sqlx.NewDb(drv.DB(), "mysql") // in real code: sqlx.Open("mysql", dsn)
	defer db.Close()

	err := sqlxretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sqlx.Tx) error {
		fmt.Println("attempt", txretry.Attempt(ctx))
		_, err := tx.ExecContext(ctx, tx.Rebind("UPDATE accounts SET balance = balance - ? WHERE id = ?"), 10, 1)
		return err
	}, txretry.WithIsolation(sql.LevelSerializable))
	fmt.Println("err:", err)
	// Output:
	// attempt 1
	// attempt 2
	// err: <nil>
}
