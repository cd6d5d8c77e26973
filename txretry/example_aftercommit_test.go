package txretry_test

import (
	"context"
	"fmt"

	"github.com/txretry/txretry/txretry"
)

// A side effect registered with AfterCommit runs once, after the commit:
// the first attempt loses to a concurrent writer and is retried, so its
// publish is dropped, and the second attempt's runs before Run returns.
// The store and its adapter are the Run example's.
func ExampleAfterCommit() {
	s := new(store)
	err := txretry.Run(context.Background(), storeAdapter{s: s, fn: func(ctx context.Context, tx *storeTx) error {
		attempt := txretry.Attempt(ctx)
		tx.value++
		value := tx.value
		txretry.AfterCommit(ctx, func(context.Context) {
			fmt.Println("publish: value", value, "from attempt", attempt)
		})
		if attempt == 1 {
			s.mu.Lock()
			s.value, s.version = 100, s.version+1 // another writer commits first
			s.mu.Unlock()
		}
		fmt.Println("attempt", attempt, "returns")
		return nil
	}})
	fmt.Println("err:", err)

	// Outside any call, f runs at once.
	txretry.AfterCommit(context.Background(), func(context.Context) { fmt.Println("no transaction: at once") })
	// Output:
	// attempt 1 returns
	// attempt 2 returns
	// publish: value 101 from attempt 2
	// err: <nil>
	// no transaction: at once
}
