package txretry_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakeclock"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

func TestRetryBudgetValidation(t *testing.T) {
	for _, tc := range []struct {
		name             string
		ratio, perSecond float64
	}{
		{"negative ratio", -0.1, 1},
		{"negative per second", 0.1, -1},
		{"both zero", 0, 0},
		{"NaN", math.NaN(), 1},
		{"Inf", 0.1, math.Inf(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := txretry.NewRetryBudget(tc.ratio, tc.perSecond, nil); !errors.Is(err, txretry.ErrInvalidOption) {
				t.Fatalf("err = %v, want ErrInvalidOption", err)
			}
		})
	}
}

// A typed nil Clock is an error, as with WithClock, not a panic on first use.
func TestRetryBudgetRejectsATypedNilClock(t *testing.T) {
	var clk *fakeclock.Clock
	b, err := txretry.NewRetryBudget(0.2, 10, clk)
	if !errors.Is(err, txretry.ErrInvalidOption) || b != nil {
		t.Fatalf("NewRetryBudget with a typed nil clock = %v, %v; want nil, ErrInvalidOption", b, err)
	}
}

// A storm: every attempt fails with a retryable code. With the budget, total
// attempts stay within (1+ratio) x calls + perSecond x (seconds+1).
func TestRetryBudgetBoundsAStorm(t *testing.T) {
	const (
		ratio     = 0.1
		perSecond = 2.0
		calls     = 200
	)
	var f *fixture
	var attempts atomic.Int32
	f = newFixture(t, &fakedb.Driver{OnExec: func(context.Context, int, string, []driver.NamedValue) error {
		attempts.Add(1)
		f.clock.Advance(10 * time.Millisecond)
		return errSerialization
	}})
	b, err := txretry.NewRetryBudget(ratio, perSecond, f.clock)
	if err != nil {
		t.Fatal(err)
	}
	start := f.clock.Now()
	var byBudget int
	for range calls {
		var n atomic.Int32
		err := txretry.RunInTx(context.Background(), f.db, execFn(&n), f.opts(txretry.WithRetryBudget(b))...)
		var re *txretry.RetryError
		if !errors.As(err, &re) || !errors.Is(err, txretry.ErrRetriesExhausted) {
			t.Fatalf("err = %v, want exhaustion", err)
		}
		if re.Reason == "retry budget" {
			byBudget++
		}
	}
	seconds := f.clock.Now().Sub(start).Seconds()
	bound := (1+ratio)*calls + perSecond*(seconds+1)
	if got := float64(attempts.Load()); got > bound {
		t.Fatalf("%v attempts in %.1fs for %d calls, bound %.1f", got, seconds, calls, bound)
	}
	if byBudget < calls/2 {
		t.Fatalf("only %d of %d calls stopped by the budget", byBudget, calls)
	}
	// Without the budget the same storm makes DefaultMaxAttempts attempts a call.
	attempts.Store(0)
	var n atomic.Int32
	_ = txretry.RunInTx(context.Background(), f.db, execFn(&n), f.opts()...)
	if attempts.Load() != txretry.DefaultMaxAttempts {
		t.Fatalf("without a budget %d attempts, want %d", attempts.Load(), txretry.DefaultMaxAttempts)
	}
}

func TestRetryBudgetRefillsOverTime(t *testing.T) {
	clk := &fakeclock.Clock{}
	b, err := txretry.NewRetryBudget(0, 1, clk)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Tokens(); got != 1 {
		t.Fatalf("a new budget holds %v tokens, want one second's worth (1)", got)
	}
	clk.Advance(time.Hour)
	if got := b.Tokens(); got != 10 {
		t.Fatalf("after an hour %v tokens, want the cap of 10", got)
	}
}
