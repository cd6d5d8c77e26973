package txretry_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// The cost of RunInTx over a hand-written BeginTx/fn/Commit, on the scripted
// fake driver (no server): run with -benchmem and compare ns/op and allocs/op,
// each pair with the same kind of context.

func benchFn(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, "UPDATE t SET v = v + 1")
	return err
}

// handWritten is the loop RunInTx is compared with: BeginTx, fn, Commit.
func handWritten(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := benchFn(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func benchHandWritten(b *testing.B, ctx context.Context) {
	db := (&fakedb.Driver{NoLog: true}).DB()
	defer db.Close()
	b.ReportAllocs()
	for b.Loop() {
		if err := handWritten(ctx, db); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRunInTx(b *testing.B, ctx context.Context, opts ...txretry.Option) {
	db := (&fakedb.Driver{NoLog: true}).DB()
	defer db.Close()
	b.ReportAllocs()
	for b.Loop() {
		if err := txretry.RunInTx(ctx, db, benchFn, opts...); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHandWritten(b *testing.B) { benchHandWritten(b, context.Background()) }

func BenchmarkRunInTx(b *testing.B) { benchRunInTx(b, context.Background()) }

func BenchmarkRunInTxNoContentionManager(b *testing.B) {
	benchRunInTx(b, context.Background(), txretry.WithoutContentionManager())
}

// A call with options resolves them into a configuration of its own; one
// without shares the defaults.
func BenchmarkRunInTxWithOptions(b *testing.B) {
	benchRunInTx(b, context.Background(), txretry.WithLabel("bench"), txretry.WithMaxAttempts(5))
}

// The same with a cancellable context, as a request's usually is: RunInTx
// then also watches it during BEGIN.

func BenchmarkHandWrittenCancellable(b *testing.B) { benchHandWritten(b, cancellable(b)) }

func BenchmarkRunInTxCancellable(b *testing.B) { benchRunInTx(b, cancellable(b)) }

func cancellable(b *testing.B) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	return ctx
}
