package txretry_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/txretry/txretry"
	"github.com/txretry/txretry/internal/fakedb"
)

// The observer benchmarks compare a first-try call without an observer to
// the same call with a no-op one: the difference is what observing costs,
// and the call without an observer allocates nothing for events.

func benchmarkRunInTx(b *testing.B, opts ...txretry.Option) {
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	ctx := context.Background()
	fn := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE t SET v = v + 1")
		return err
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := txretry.RunInTx(ctx, db, fn, opts...); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRunInTxNoObserver(b *testing.B) {
	benchmarkRunInTx(b)
}

func BenchmarkRunInTxObserver(b *testing.B) {
	benchmarkRunInTx(b, txretry.WithObserver(txretry.ObserverFunc(func(context.Context, txretry.Event) {})))
}
