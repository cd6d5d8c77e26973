//go:build !race

// The race detector makes sync.Pool drop items at random, so allocation
// counts mean something only without it; `make unit` runs this test in a
// second, race-free pass.

package txretry_test

import (
	"context"
	"testing"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// TestOverheadAllocations holds RunInTx to what the README promises: at most
// 2 allocations per call over a hand-written BeginTx/fn/Commit on the same
// driver, with a plain and with a cancellable context, with and without
// options.
func TestOverheadAllocations(t *testing.T) {
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		opts []txretry.Option
	}{
		{"context.Background", context.Background(), nil},
		{"cancellable", cancellable, nil},
		{"options", context.Background(), []txretry.Option{txretry.WithLabel("transfer"), txretry.WithMaxAttempts(5)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := (&fakedb.Driver{NoLog: true}).DB()
			defer db.Close()
			ctx, opts := tc.ctx, tc.opts
			hand := testing.AllocsPerRun(1000, func() {
				if err := handWritten(ctx, db); err != nil {
					t.Fatal(err)
				}
			})
			got := testing.AllocsPerRun(1000, func() {
				if err := txretry.RunInTx(ctx, db, benchFn, opts...); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("RunInTx %v allocations per call, hand-written %v", got, hand)
			if got > hand+2 {
				t.Fatalf("RunInTx makes %v allocations per call, the hand-written loop %v: more than 2 over", got, hand)
			}
		})
	}
}
