package gormretry_test

import (
	"context"
	"fmt"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/txretry/txretry/txretry/gormretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

func ExampleTxOrDB() {
	drv := &fakedb.Driver{}
	sqlDB := drv.DB()
	defer sqlDB.Close()
	// In real code: gorm.Open(postgres.Open(dsn), &gorm.Config{})
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	fmt.Println("outside a call, on the pool:", gormretry.TxOrDB(ctx, db).Statement.ConnPool == sqlDB)
	err = gormretry.RunInTx(ctx, db, func(ctx context.Context, tx *gorm.DB) error {
		got := gormretry.TxOrDB(ctx, db).Statement.ConnPool
		fmt.Println("in fn, on fn's transaction:", got == tx.Statement.ConnPool)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// outside a call, on the pool: true
	// in fn, on fn's transaction: true
	// err: <nil>
}
