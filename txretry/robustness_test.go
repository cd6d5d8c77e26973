package txretry_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/pgxretry"
)

func noPanic(t *testing.T, f func() error) (err error) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}

// Typed nil handles give ErrInvalidOption, not a panic.
func TestTypedNilHandlesAreInvalid(t *testing.T) {
	fn := func(context.Context, *sql.Tx) error { return nil }
	pfn := func(context.Context, pgx.Tx) error { return nil }
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"*sql.DB", func() error { return txretry.RunInTx(context.Background(), (*sql.DB)(nil), fn) }},
		{"*sql.Conn", func() error { return txretry.RunInTx(context.Background(), (*sql.Conn)(nil), fn) }},
		{"*pgxpool.Pool", func() error { return pgxretry.RunInTx(context.Background(), (*pgxpool.Pool)(nil), pfn) }},
		{"*pgx.Conn", func() error { return pgxretry.RunInTx(context.Background(), (*pgx.Conn)(nil), pfn) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := noPanic(t, tc.call); !errors.Is(err, txretry.ErrInvalidOption) {
				t.Fatalf("err = %v, want ErrInvalidOption", err)
			}
		})
	}
}

// A deadline that passes while BEGIN waits for a pooled connection is
// reported as the context's error (DeadlineExceeded), not context.Canceled.
func TestBeginReportsTheContextsOwnCause(t *testing.T) {
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	db.SetMaxOpenConns(1)
	busy, _ := db.Conn(context.Background())
	defer busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := txretry.RunInTx(ctx, db, func(context.Context, *sql.Tx) error { return nil }, txretry.WithoutContentionManager())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded (the caller's ctx.Err() is %v)", err, ctx.Err())
	}
}

// Values that options accept must not panic or hang later: a nil inner
// backoff counts as no delay, zero-value managers and budgets work as
// documented, and a nil observer func is rejected up front.
func TestBadValuesInsideOptions(t *testing.T) {
	retryOnce := func(n int) error {
		if n == 1 {
			return &fakedb.SQLStateError{Code: "40001"}
		}
		return nil
	}
	for _, tc := range []struct {
		name string
		opt  txretry.Option
		want error // nil: success
	}{
		{"Capped(d, nil)", txretry.WithBackoff(txretry.Capped(time.Millisecond, nil)), nil},
		{"FullJitter(nil)", txretry.WithBackoff(txretry.FullJitter(nil)), nil},
		{"zero RetryBudget allows no retry", txretry.WithRetryBudget(&txretry.RetryBudget{}), txretry.ErrRetriesExhausted},
		{"zero ContentionManager", txretry.WithContentionManager(&txretry.ContentionManager{}), nil},
		{"nil ObserverFunc", txretry.WithObserver(txretry.ObserverFunc(nil)), txretry.ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := (&fakedb.Driver{OnCommit: retryOnce}).DB()
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := noPanic(t, func() error {
				return txretry.RunInTx(ctx, db, func(context.Context, *sql.Tx) error { return nil }, tc.opt)
			})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

// Describe of a typed nil error.
func TestDescribeTypedNil(t *testing.T) {
	var e *fakedb.SQLStateError
	err := noPanic(t, func() error { _ = txretry.Describe(e); return nil })
	if err != nil {
		t.Fatal(err)
	}
}

// An observer that panics on AttemptStarted (after admission) must not keep
// the gate's place.
func TestObserverPanicLeavesTheGate(t *testing.T) {
	m, _ := txretry.NewContentionManager(1)
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	bad := txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
		if e.Kind == txretry.AttemptStarted {
			panic("observer bug")
		}
	})
	_ = noPanic(t, func() error {
		return txretry.RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error { return nil },
			txretry.WithContentionManager(m), txretry.WithObserver(bad))
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := txretry.RunInTx(ctx, db, func(context.Context, *sql.Tx) error { return nil }, txretry.WithContentionManager(m)); err != nil {
		t.Fatalf("err = %v: the call whose observer panicked kept its place in the gate", err)
	}
}
