package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakeclock"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// TestTimeBudgetEndsABeginThatWaits: a retry whose BEGIN waits (for a
// pooled connection, or for a new one to open) is abandoned when the time
// budget runs out, like a BEGIN under the context's deadline: the call
// returns exhausted by the budget with the last conflict, and fn does not
// run again. The wait runs on real time, bounded here by a budget of
// 50 ms; a BEGIN left to wait would fail after 5 s.
func TestTimeBudgetEndsABeginThatWaits(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnBegin: func(ctx context.Context, n int, _ driver.TxOptions) error {
		if n == 1 {
			return nil
		}
		select { // a connection that takes long to come
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
			return errors.New("BEGIN was not abandoned at the time budget")
		}
	}})
	var calls atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error {
		calls.Add(1)
		return errSerialization
	}, f.opts(txretry.WithTimeBudget(50*time.Millisecond))...)
	var re *txretry.RetryError
	if !errors.As(err, &re) || re.Reason != "time budget" || !errors.Is(err, txretry.ErrRetriesExhausted) || !errors.Is(re.Err, errSerialization) {
		t.Fatalf("err = %v, want a RetryError (time budget) holding the 40001", err)
	}
	if re.Attempts != 2 || calls.Load() != 1 {
		t.Fatalf("%d attempts, fn ran %d times; want 2 attempts (the second cut in BEGIN), fn once", re.Attempts, calls.Load())
	}
}

// TestTimeBudgetLeavesBeginOnASingleConnection: on a *sql.Conn the time
// budget does not abandon a slow BEGIN, whose driver would close the one
// connection to do so: BEGIN is left to finish (here after 100 ms, past
// a budget of 50 ms), and the attempt runs.
func TestTimeBudgetLeavesBeginOnASingleConnection(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnBegin: func(ctx context.Context, n int, _ driver.TxOptions) error {
		if n == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
			return nil
		}
	}})
	conn, err := f.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var calls atomic.Int32
	err = txretry.RunInTx(context.Background(), conn, func(context.Context, *sql.Tx) error {
		if calls.Add(1) == 1 {
			return errSerialization
		}
		return nil
	}, f.opts(txretry.WithTimeBudget(50*time.Millisecond))...)
	if err != nil || calls.Load() != 2 {
		t.Fatalf("err = %v after %d runs of fn, want nil after 2", err, calls.Load())
	}
}

// TestTimeBudgetCutsTheLockTimeout: the lock timeout of an attempt, doubled
// by the lock timeouts before it, is cut to what is left of the time budget
// (or the deadline), so that one lock wait cannot carry the attempt past
// it. Each attempt here waits out its lock timeout (the fake clock moves
// by it); rnd 0.5 over 2 ms doubling: waits of 1, 2 ms.
func TestTimeBudgetCutsTheLockTimeout(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		opt  txretry.Option
		want []time.Duration
	}{
		{"time budget", txretry.WithTimeBudget(250 * ms), []time.Duration{50 * ms, 100 * ms, 97 * ms}}, // 250 - (50+1) - (100+2)
		{"no budget", txretry.WithMaxAttempts(3), []time.Duration{50 * ms, 100 * ms, 200 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var begun, checked []txretry.TxOptions
			clk := &fakeclock.Clock{}
			a := optsAdapter{begun: &begun, checked: &checked, fn: func(ctx context.Context) error {
				clk.Advance(begun[len(begun)-1].LockTimeout) // the lock wait runs out
				return errLockTimeout
			}}
			err := txretry.Run(context.Background(), a, txretry.WithClock(clk), txretry.WithRand(func() float64 { return 0.5 }),
				txretry.WithIsolation(sql.LevelSerializable), txretry.WithLockTimeout(50*ms), tc.opt)
			if !errors.Is(err, txretry.ErrRetriesExhausted) {
				t.Fatalf("err = %v, want exhaustion", err)
			}
			var got []time.Duration
			for _, o := range begun {
				got = append(got, o.LockTimeout)
			}
			if !equalDurations(got, tc.want) {
				t.Fatalf("lock timeouts %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTimeBudgetSpentInTheQueue: a first attempt admitted by the
// contention manager after the whole time budget passed in its queue is not
// run: the call returns exhausted by the budget after no attempt. (The
// admission's wait runs on real time, the budget on the fake clock, which
// the test moves past it while the call queues.)
func TestTimeBudgetSpentInTheQueue(t *testing.T) {
	m := newManager(t, 0)
	closeGate(t, m, "k") // one place
	f := newFixture(t, &fakedb.Driver{})
	entered, release := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error {
			close(entered)
			<-release
			return nil
		}, txretry.WithContentionManager(m), txretry.WithLabel("k"))
	}()
	<-entered
	var calls atomic.Int32
	errc := make(chan error, 1)
	go func() {
		errc <- txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error {
			calls.Add(1)
			return nil
		}, txretry.WithContentionManager(m), txretry.WithLabel("k"), txretry.WithClock(f.clock), txretry.WithTimeBudget(time.Minute))
	}()
	for m.Queued() != 1 {
		time.Sleep(time.Millisecond)
	}
	f.clock.Advance(2 * time.Minute)
	close(release)
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	err := <-errc
	var re *txretry.RetryError
	if !errors.As(err, &re) || re.Reason != "time budget" || re.Attempts != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a RetryError (time budget) after 0 attempts", err)
	}
	if calls.Load() != 0 {
		t.Fatalf("fn ran %d times after the budget had passed, want 0", calls.Load())
	}
}
