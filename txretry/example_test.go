package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// The scripted fake driver stands in for a database here: its first COMMIT
// fails with a serialization failure, as PostgreSQL's does under SERIALIZABLE.
func ExampleRunInTx() {
	drv := &fakedb.Driver{OnCommit: func(n int) error {
		if n == 1 {
			return &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
		}
		return nil
	}}
	db := drv.DB() // in real code: sql.Open("pgx", dsn) or sql.Open("mysql", dsn)
	defer db.Close()

	err := txretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
		fmt.Println("attempt", txretry.Attempt(ctx))
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 1")
		return err
	}, txretry.WithIsolation(sql.LevelSerializable))
	fmt.Println("err:", err)
	// Output:
	// attempt 1
	// attempt 2
	// err: <nil>
}

func ExampleRetryError() {
	drv := &fakedb.Driver{OnExec: func(context.Context, int, string, []driver.NamedValue) error {
		return &fakedb.SQLStateError{Code: "40P01", Message: "deadlock detected"}
	}}
	db := drv.DB()
	defer db.Close()

	err := txretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE t SET v = 1")
		return err
	}, txretry.WithMaxAttempts(3), txretry.WithBackoff(txretry.Constant(time.Millisecond)))

	var re *txretry.RetryError
	fmt.Println(errors.Is(err, txretry.ErrRetriesExhausted), errors.As(err, &re) && re.Attempts == 3)
	fmt.Println(err)
	// Output:
	// true true
	// txretry: stopped after 3 attempt(s) (attempt limit): SQLSTATE 40P01 (fakedb.SQLStateError)
}

func ExampleWithRetryOn() {
	// The first UPDATE finds the row locked (NOWAIT / lock_timeout): 55P03,
	// which is not retried by default.
	drv := &fakedb.Driver{OnExec: func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
		if n == 1 {
			return &fakedb.SQLStateError{Code: "55P03", Message: "could not obtain lock"}
		}
		return nil
	}}
	db := drv.DB()
	defer db.Close()
	fn := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE t SET v = 1")
		return err
	}

	// Also retry lock timeouts, on top of the default class.
	err := txretry.RunInTx(context.Background(), db, fn,
		txretry.WithRetryOn(pgerr.IsLockNotAvailable, mysqlerr.IsLockWaitTimeout))
	fmt.Println("err:", err, "attempts:", drv.Stats().Begins)
	// Output: err: <nil> attempts: 2
}

func ExampleCommitMarkerDDL() {
	ddl, err := txretry.CommitMarkerDDL("txretry_markers")
	fmt.Println(ddl, err)
	_, err = txretry.CommitMarkerDDL("markers; DROP TABLE users")
	fmt.Println(errors.Is(err, txretry.ErrInvalidOption))
	// Output:
	// CREATE TABLE IF NOT EXISTS txretry_markers (token VARCHAR(64) NOT NULL PRIMARY KEY, created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) <nil>
	// true
}

func ExampleFullJitter() {
	b := txretry.FullJitter(txretry.Capped(100*time.Millisecond, txretry.Exponential(10*time.Millisecond)))
	for retry := 1; retry <= 5; retry++ {
		fmt.Println(b.Delay(retry, 0.5)) // half of 10, 20, 40, 80, 100 ms
	}
	// Output:
	// 5ms
	// 10ms
	// 20ms
	// 40ms
	// 50ms
}

// moveMoney is the transaction of a transfer, for the examples.
func moveMoney(from, to int, amount int64) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - $1 WHERE id = $2", amount, from); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, to)
		return err
	}
}

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
