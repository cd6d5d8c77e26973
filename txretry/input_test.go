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

func TestInvalidInputGivesErrorsNotPanics(t *testing.T) {
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	fn := func(context.Context, *sql.Tx) error { return nil }
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"max attempts 0", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithMaxAttempts(0)) }},
		{"max attempts negative", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithMaxAttempts(-3)) }},
		{"nil backoff", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithBackoff(nil)) }},
		{"zero budget", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithTimeBudget(0)) }},
		{"negative attempt timeout", func() error {
			return txretry.RunInTx(context.Background(), db, fn, txretry.WithAttemptTimeout(-time.Second))
		}},
		{"zero commit timeout", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithCommitTimeout(0)) }},
		{"zero verify timeout", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithVerifyTimeout(0)) }},
		{"bad isolation", func() error {
			return txretry.RunInTx(context.Background(), db, fn, txretry.WithIsolation(sql.IsolationLevel(99)))
		}},
		{"nil classifier", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithClassifier(nil)) }},
		{"nil retry-on", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithRetryOn(nil)) }},
		{"nil clock", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithClock(nil)) }},
		{"nil rand", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithRand(nil)) }},
		{"nil observer", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithObserver(nil)) }},
		{"nil verify", func() error { return txretry.RunInTx(context.Background(), db, fn, txretry.WithVerify(nil)) }},
		{"marker injection", func() error {
			return txretry.RunInTx(context.Background(), db, fn, txretry.WithCommitMarker("m; DROP TABLE x"))
		}},
		{"nil option", func() error { return txretry.RunInTx(context.Background(), db, fn, nil) }},
		{"nil db", func() error { return txretry.RunInTx(context.Background(), nil, fn) }},
		{"nil fn", func() error { return txretry.RunInTx(context.Background(), db, nil) }},
		{"nil ctx", func() error { return txretry.RunInTx(nil, db, fn) }}, //nolint:staticcheck // testing bad input
		// A *sql.DB not made by sql.Open, whose Driver method panics.
		{"zero sql.DB, lock timeout", func() error {
			return txretry.RunInTx(context.Background(), &sql.DB{}, fn, txretry.WithLockTimeout(time.Second))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, txretry.ErrInvalidOption) {
				t.Fatalf("err = %v, want ErrInvalidOption", err)
			}
		})
	}
	if st := db.Stats(); st.OpenConnections != 0 {
		t.Fatalf("%d connections opened for invalid calls", st.OpenConnections)
	}
}
