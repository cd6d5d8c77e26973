package txretry_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/txretry/txretry/txretry"
)

// store is a user's own transactional store: a counter whose transactions
// take a snapshot at Begin and fail at Commit with a serialization failure
// if another transaction committed meanwhile (optimistic concurrency).
type store struct {
	mu      sync.Mutex
	value   int
	version int
}

// storeTx is one transaction of store's.
type storeTx struct {
	s       *store
	version int // the snapshot's version
	value   int // the value as the transaction sees it
}

// conflict carries SQLSTATE 40001, which the default classifier retries.
type conflict struct{}

func (conflict) Error() string    { return "concurrent update" }
func (conflict) SQLState() string { return "40001" }

func (t *storeTx) Commit(context.Context, time.Duration) error {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if t.s.version != t.version {
		return conflict{} // a server answer: proves nothing was committed
	}
	t.s.value, t.s.version = t.value, t.s.version+1
	return nil
}

func (t *storeTx) Rollback(context.Context, time.Duration) error { return nil }

func (t *storeTx) Exec(context.Context, string) error {
	return fmt.Errorf("storeTx runs no SQL")
}

// storeAdapter is one call's adapter: the store (its handle) and fn.
type storeAdapter struct {
	s  *store
	fn func(ctx context.Context, tx *storeTx) error
}

func (a storeAdapter) Begin(context.Context, txretry.TxOptions) (*storeTx, error) {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	return &storeTx{s: a.s, version: a.s.version, value: a.s.value}, nil
}

func (a storeAdapter) Call(ctx context.Context, tx *storeTx) error { return a.fn(ctx, tx) }

// Handle makes nested calls on the same store join, and gives the store a
// default contention manager.
func (a storeAdapter) Handle() any { return a.s }

// Run plugs a transaction type of one's own into the engine: here an
// in-memory store whose COMMIT fails when another transaction committed
// since BEGIN. The first attempt's COMMIT loses to a concurrent writer; the
// second commits.
func ExampleRun() {
	s := new(store)
	increment := func(ctx context.Context, tx *storeTx) error {
		fmt.Println("attempt", txretry.Attempt(ctx))
		tx.value++
		if txretry.Attempt(ctx) == 1 {
			s.mu.Lock()
			s.value, s.version = 100, s.version+1 // another writer commits first
			s.mu.Unlock()
		}
		return nil
	}
	err := txretry.Run(context.Background(), storeAdapter{s: s, fn: increment})
	fmt.Println("err:", err, "value:", s.value)
	// Output:
	// attempt 1
	// attempt 2
	// err: <nil> value: 101
}
