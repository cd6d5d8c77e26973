package txretry_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// lockingAdapter is storeAdapter as an AdapterKeyLocks: it records the
// keys it was asked to lock.
type lockingAdapter struct {
	storeAdapter
	mu     *sync.Mutex
	locked *[][]string
	wait   func(ctx context.Context) error // the database lock wait
}

func (a lockingAdapter) BeginLocked(ctx context.Context, o txretry.TxOptions, keys []string) (*storeTx, error) {
	if a.wait != nil {
		if err := a.wait(ctx); err != nil {
			return nil, err
		}
	}
	a.mu.Lock()
	*a.locked = append(*a.locked, slices.Clone(keys))
	a.mu.Unlock()
	return a.Begin(ctx, o)
}

func (a lockingAdapter) CheckKeyLocks() error { return nil }

var _ txretry.AdapterKeyLocks[*storeTx] = lockingAdapter{}

// halfLockingAdapter has BeginLocked but not CheckKeyLocks: it is no
// AdapterKeyLocks.
type halfLockingAdapter struct{ storeAdapter }

func (a halfLockingAdapter) BeginLocked(ctx context.Context, o txretry.TxOptions, _ []string) (*storeTx, error) {
	return a.Begin(ctx, o)
}

func newLockingAdapter(fn func(context.Context, *storeTx) error) lockingAdapter {
	return lockingAdapter{storeAdapter: storeAdapter{s: new(store), fn: fn}, mu: new(sync.Mutex), locked: new([][]string)}
}

// The keys reach BeginLocked sorted and without duplicates, once per
// attempt, and a nested call on the same handle joins without locking.
func TestDatabaseKeyLocksGetSortedKeysPerAttempt(t *testing.T) {
	var a lockingAdapter
	n := 0
	a = newLockingAdapter(func(ctx context.Context, tx *storeTx) error {
		if err := txretry.Run(ctx, lockingAdapter{storeAdapter: storeAdapter{s: a.s, fn: noop}, mu: a.mu, locked: a.locked},
			txretry.WithContentionKeys("z"), txretry.WithDatabaseKeyLocks()); err != nil {
			return err
		}
		if n++; n == 1 {
			return &fakedb.SQLStateError{Code: "40001"}
		}
		return nil
	})
	err := txretry.Run(context.Background(), a, txretry.WithContentionKeys("b", "a", "b", "c"), txretry.WithDatabaseKeyLocks())
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"a", "b", "c"}, {"a", "b", "c"}}
	if !slices.EqualFunc(*a.locked, want, slices.Equal[[]string]) {
		t.Fatalf("BeginLocked got %q, want %q", *a.locked, want)
	}
}

// The wait for the database locks ends with the time budget, not only with
// the context.
func TestDatabaseKeyLockWaitEndsWithTheTimeBudget(t *testing.T) {
	a := newLockingAdapter(noop)
	a.wait = func(ctx context.Context) error {
		<-ctx.Done() // another process holds the lock for good
		return ctx.Err()
	}
	start := time.Now()
	err := txretry.Run(context.Background(), a, txretry.WithContentionKeys("k"), txretry.WithDatabaseKeyLocks(), txretry.WithTimeBudget(50*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the wait took %v", d)
	}
}

// Calls the option cannot serve fail before any attempt with
// ErrInvalidOption, and the message never holds a key.
func TestDatabaseKeyLocksBadInput(t *testing.T) {
	const key = "secret-user-42"
	fn := func(context.Context, *storeTx) error { t.Error("fn ran"); return nil }
	d := &fakedb.Driver{}
	db := d.DB()
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sqlFn := func(context.Context, *sql.Tx) error { t.Error("fn ran"); return nil }
	ctx := context.Background()
	for _, tc := range []struct {
		name, want string
		call       func() error
	}{
		{"without keys", "without WithContentionKeys", func() error {
			return txretry.Run(ctx, newLockingAdapter(fn), txretry.WithDatabaseKeyLocks())
		}},
		{"adapter without BeginLocked", "not an AdapterKeyLocks", func() error {
			return txretry.Run(ctx, storeAdapter{s: new(store), fn: fn}, txretry.WithContentionKeys(key), txretry.WithDatabaseKeyLocks())
		}},
		{"adapter without CheckKeyLocks", "not an AdapterKeyLocks", func() error {
			return txretry.Run(ctx, halfLockingAdapter{storeAdapter{s: new(store), fn: fn}}, txretry.WithContentionKeys(key), txretry.WithDatabaseKeyLocks())
		}},
		{"unknown driver, *sql.DB", "is not one of", func() error {
			return txretry.RunInTx(ctx, db, sqlFn, txretry.WithContentionKeys(key), txretry.WithDatabaseKeyLocks())
		}},
		{"unknown driver, *sql.Conn", "is not one of", func() error {
			return txretry.RunInTx(ctx, conn, sqlFn, txretry.WithContentionKeys(key), txretry.WithDatabaseKeyLocks())
		}},
		{"a DB of the caller's own", "needs a *sql.DB or *sql.Conn", func() error {
			return txretry.RunInTx(ctx, otherDB{db}, sqlFn, txretry.WithContentionKeys(key), txretry.WithDatabaseKeyLocks())
		}},
		{"pgx handle of another type", "needs a *pgxpool.Pool or *pgx.Conn", func() error {
			return pgxretry.RunInTx(ctx, otherBeginner{}, func(context.Context, pgx.Tx) error { t.Error("fn ran"); return nil },
				txretry.WithContentionKeys(key), txretry.WithDatabaseKeyLocks())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := noPanic(t, tc.call)
			if !errors.Is(err, txretry.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalidOption saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), key) {
				t.Fatalf("the error shows a key: %v", err)
			}
		})
	}
	if s := d.Stats(); s.Begins != 0 || s.Queries != 0 {
		t.Fatalf("the fake database saw %d BEGINs and %d queries", s.Begins, s.Queries)
	}
}

// otherDB is a DB of the caller's own, which has no connection to lock on.
type otherDB struct{ db *sql.DB }

func (o otherDB) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	return o.db.BeginTx(ctx, opts)
}

// otherBeginner is a pgx Beginner of the caller's own.
type otherBeginner struct{}

func (otherBeginner) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) {
	return nil, errors.New("not reached")
}
