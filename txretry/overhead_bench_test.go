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

// BenchmarkOverhead runs each pair on the same kind of context: a plain
// one, and a cancellable one as a request's usually is (RunInTx then also
// watches it during BEGIN). A call with options resolves them into a
// configuration of its own; one without shares the defaults. The figure
// that matters is the difference within a pair; the integration module's
// BenchmarkOverheadPostgres sets it beside a real transaction.
func BenchmarkOverhead(b *testing.B) {
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := (&fakedb.Driver{NoLog: true}).DB()
	defer db.Close()
	for _, bc := range []struct {
		name string
		ctx  context.Context
		run  func(ctx context.Context) error
	}{
		{"bare", context.Background(), func(ctx context.Context) error { return handWritten(ctx, db) }},
		{"RunInTx", context.Background(), func(ctx context.Context) error { return txretry.RunInTx(ctx, db, benchFn) }},
		{"RunInTx-no-manager", context.Background(), func(ctx context.Context) error {
			return txretry.RunInTx(ctx, db, benchFn, txretry.WithoutContentionManager())
		}},
		{"RunInTx-options", context.Background(), func(ctx context.Context) error {
			return txretry.RunInTx(ctx, db, benchFn, txretry.WithLabel("bench"), txretry.WithMaxAttempts(5))
		}},
		{"bare-cancellable", cancellable, func(ctx context.Context) error { return handWritten(ctx, db) }},
		{"RunInTx-cancellable", cancellable, func(ctx context.Context) error { return txretry.RunInTx(ctx, db, benchFn) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.run(bc.ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchRunInTx runs RunInTx with opts on the fake driver.
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
