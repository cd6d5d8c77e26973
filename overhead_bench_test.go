package txretry_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/txretry/txretry"
	"github.com/txretry/txretry/internal/fakedb"
)

// The cost of RunInTx over a hand-written BeginTx/fn/Commit, on the scripted
// fake driver (no server): run with -benchmem and compare ns/op and allocs/op.

func benchFn(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, "UPDATE t SET v = v + 1")
	return err
}

func BenchmarkHandWritten(b *testing.B) {
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := benchFn(ctx, tx); err != nil {
			_ = tx.Rollback()
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRunInTx(b *testing.B) {
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := txretry.RunInTx(ctx, db, benchFn); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRunInTxNoContentionManager(b *testing.B) {
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	ctx := context.Background()
	opt := txretry.WithoutContentionManager()
	b.ReportAllocs()
	for b.Loop() {
		if err := txretry.RunInTx(ctx, db, benchFn, opt); err != nil {
			b.Fatal(err)
		}
	}
}
