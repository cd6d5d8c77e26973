package txretry_test

import (
	"context"
	"testing"

	"github.com/txretry/txretry/txretry"
)

// The observer benchmarks compare a first-try call without an observer to
// the same call with a no-op one: the difference is what observing costs,
// and the call without an observer allocates nothing for events.

func BenchmarkRunInTxNoObserver(b *testing.B) {
	benchRunInTx(b, context.Background())
}

func BenchmarkRunInTxObserver(b *testing.B) {
	benchRunInTx(b, context.Background(), txretry.WithObserver(txretry.ObserverFunc(func(context.Context, txretry.Event) {})))
}
