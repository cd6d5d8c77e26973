package gormretry_test

import (
	"context"
	"database/sql"
	"fmt"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/gormretry"
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
	sqlDB := drv.DB()
	defer sqlDB.Close()
	// In real code: gorm.Open(postgres.Open(dsn), &gorm.Config{})
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}

	err = gormretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *gorm.DB) error {
		fmt.Println("attempt", txretry.Attempt(ctx))
		return tx.Exec("UPDATE accounts SET balance = balance - ? WHERE id = ?", 10, 1).Error
	}, txretry.WithIsolation(sql.LevelSerializable))
	fmt.Println("err:", err)
	// Output:
	// attempt 1
	// attempt 2
	// err: <nil>
}
