package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakeclock"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

func newManager(t *testing.T, width int) *txretry.ContentionManager {
	t.Helper()
	m, err := txretry.NewContentionManager(width)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// With the default per-handle manager, a domain is open: a first attempt
// goes straight in. A conflict doubles the domain's spacing from 1 ms, and
// the retry waits half to all of it (here all: rand is 1) or the backoff,
// whichever is longer; from its third attempt on, a call goes at once to
// run alone in its domain. The calls here have no deadline: the gate never
// closes.
func TestContentionManagerIsOnByDefaultPerHandle(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(3, errSerialization)})
	var calls atomic.Int32
	if err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), txretry.WithClock(f.clock), txretry.WithRand(func() float64 { return 1 }),
		txretry.WithBackoff(txretry.Constant(time.Microsecond))); err != nil {
		t.Fatal(err)
	}
	if got, want := f.clock.Waits(), []time.Duration{time.Millisecond, time.Nanosecond, time.Nanosecond}; !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v: the spacing, then at once to run alone", got, want)
	}
	// Turning it off brings the backoff back for every retry.
	g := newFixture(t, &fakedb.Driver{OnExec: failFirst(2, errSerialization)})
	if err := txretry.RunInTx(context.Background(), g.db, execFn(&calls), txretry.WithClock(g.clock), txretry.WithoutContentionManager(), txretry.WithRand(func() float64 { return 1 })); err != nil {
		t.Fatal(err)
	}
	if got, want := g.clock.Waits(), []time.Duration{2 * time.Millisecond, 4 * time.Millisecond}; !slices.Equal(got, want) {
		t.Fatalf("waits %v, want the default backoff's %v without a manager", got, want)
	}
}

// closeGate makes the domain label of m conflict once, in a call of a 1 ms
// time budget: the domain's spacing (1 ms) is more than half the call's
// time, so its gate closes, at width 1 when nobody else is in; a call that
// made no attempt is made again.
func closeGate(t *testing.T, m *txretry.ContentionManager, label string) {
	t.Helper()
	for try := 0; txretry.GateWidth(m, label) == 0; try++ {
		if try == 100 {
			t.Fatal("the gate did not close")
		}
		db := (&fakedb.Driver{OnExec: failFirst(1, errSerialization)}).DB()
		var calls atomic.Int32
		// The budget bounds BEGIN on real time: a loaded -race run can
		// spend 1 ms before it, and the call then makes no attempt.
		err := txretry.RunInTx(context.Background(), db, execFn(&calls), txretry.WithContentionManager(m),
			txretry.WithLabel(label), txretry.WithClock(&fakeclock.Clock{}), txretry.WithTimeBudget(time.Millisecond))
		db.Close()
		if err != nil && !errors.Is(err, txretry.ErrRetriesExhausted) { // its retry may queue past 1 ms behind the test's attempt
			t.Fatal(err)
		}
	}
}

// The calls of a domain that has not been conflicting never queue, while
// a hot domain of the same manager holds its gate shut with a caller
// waiting: each cold call runs and commits at once (its rare conflicts
// retry after the backoff). The two domains are found from the functions'
// code pointers, without labels.
func TestColdDomainNeverQueuesBehindAHotOne(t *testing.T) {
	m := newManager(t, 0)
	txretry.SetStall(m, time.Minute) // the queued hot callers wait on the test
	var hot, cold atomic.Int32
	drv := &fakedb.Driver{OnExec: func(_ context.Context, _ int, q string, _ []driver.NamedValue) error {
		switch {
		case q == "UPDATE hot" && hot.Add(1) <= 10:
			// The tenth conflict doubles the hot domain's spacing to
			// 512 ms, half its calls' time: its gate closes.
			return errSerialization
		case strings.HasPrefix(q, "UPDATE cold"):
			if cold.Add(1); q == "UPDATE cold, conflicting" {
				return errSerialization
			}
		}
		return nil
	}}
	f := newFixture(t, drv)
	f.clock.OnWait = nil
	release := make(chan struct{})
	holding := make(chan struct{}, 1)
	hotFn := func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE hot"); err != nil {
			return err
		}
		if hot.Load() == 11 { // the first attempt through the closed gate holds it
			holding <- struct{}{}
			<-release
		}
		return nil
	}
	var coldIn, coldFirsts atomic.Int32
	allCold := make(chan struct{})
	coldFn := func(ctx context.Context, tx *sql.Tx) error {
		if coldIn.Load() < 8 && coldIn.Add(1) == 8 { // the 8 workers' first calls run at once
			close(allCold)
		}
		<-allCold
		q := "UPDATE cold"
		if txretry.Attempt(ctx) == 1 && coldFirsts.Add(1)%50 == 0 {
			// Rare, and never twice in a call: a third attempt would
			// run alone and queue its own domain's first attempts.
			q = "UPDATE cold, conflicting"
		}
		_, err := tx.ExecContext(ctx, q)
		return err
	}
	// The hot calls have a 1 s budget, on a clock that does not move.
	hotOpts := []txretry.Option{txretry.WithContentionManager(m), txretry.WithClock(f.clock), txretry.WithTimeBudget(time.Second)}
	var queued []time.Duration
	var mu sync.Mutex
	obs := txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
		if e.Kind == txretry.CallFinished {
			mu.Lock()
			queued = append(queued, e.Queued)
			mu.Unlock()
		}
	})
	hotDone := make(chan error, 2)
	go func() {
		hotDone <- txretry.RunInTx(context.Background(), f.db, hotFn, hotOpts...)
	}()
	<-holding
	go func() {
		hotDone <- txretry.RunInTx(context.Background(), f.db, hotFn, hotOpts...)
	}()
	waitQueued(t, m, 1)

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				if err := txretry.RunInTx(context.Background(), f.db, coldFn, txretry.WithContentionManager(m), txretry.WithObserver(obs)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait() // all 200 cold calls end while the hot gate is shut
	close(release)
	for range 2 {
		if err := <-hotDone; err != nil {
			t.Fatal(err)
		}
	}
	if len(queued) != 200 || slices.ContainsFunc(queued, func(d time.Duration) bool { return d != 0 }) || cold.Load() < 204 {
		t.Fatalf("%d cold calls, %d cold attempts, queued %v: want 200 calls, some retried, none queued", len(queued), cold.Load(), queued)
	}
	// One label puts both kinds in one domain: then the cold ones queue.
	closeGate(t, m, "shared")
	release2 := make(chan struct{})
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error {
			holding <- struct{}{}
			<-release2
			return nil
		}, txretry.WithContentionManager(m), txretry.WithLabel("shared"))
	}()
	<-holding
	coldDone := make(chan error, 1)
	go func() {
		coldDone <- txretry.RunInTx(context.Background(), f.db, coldFn, txretry.WithContentionManager(m), txretry.WithLabel("shared"))
	}()
	waitQueued(t, m, 1)
	close(release2)
	if err := errors.Join(<-holderDone, <-coldDone); err != nil {
		t.Fatal(err)
	}
}

// gateHolder runs a call that holds the only place of m's closed gate "hot"
// until release is closed; m's gate does not widen meanwhile.
func gateHolder(t *testing.T, db *sql.DB, m *txretry.ContentionManager, release chan struct{}) (entered chan struct{}, done chan error) {
	txretry.SetStall(m, time.Minute) // the holder waits on the test, not on a queued caller
	entered, done = make(chan struct{}), make(chan error, 1)
	go func() {
		done <- txretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
			close(entered)
			<-release
			return nil
		}, txretry.WithContentionManager(m), txretry.WithLabel("hot"))
	}()
	<-entered
	return entered, done
}

func waitQueued(t *testing.T, m *txretry.ContentionManager, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); m.Queued() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("queued %d, want %d", m.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestContentionManagerAdmitsInFIFOOrderWithoutHoldingTransactions(t *testing.T) {
	m := closedManager(t, "hot")
	f := newFixture(t, &fakedb.Driver{})
	f.clock.OnWait = nil
	release := make(chan struct{})
	_, holderDone := gateHolder(t, f.db, m, release)

	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := 1; i <= 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				return nil
			}, txretry.WithContentionManager(m), txretry.WithLabel("hot"))
			if err != nil {
				t.Error(err)
			}
		}()
		waitQueued(t, m, i) // caller i is queued before caller i+1 starts
	}
	// Queued callers hold no transaction: only the holder has begun.
	if st := f.drv.Stats(); st.Begins != 1 || st.ActiveTx != 1 {
		t.Fatalf("begins=%d active=%d while 5 callers queue, want 1 and 1", st.Begins, st.ActiveTx)
	}
	close(release)
	wg.Wait()
	if err := <-holderDone; err != nil {
		t.Fatal(err)
	}
	for i, n := range order {
		if n != i+1 {
			t.Fatalf("admission order %v, want 1..5", order)
		}
	}
}

// Calls whose fns wait for each other (as a test that forces a deadlock
// between two transactions does) are admitted together, by a fresh gate (the
// default one per handle included) and by one that conflicts narrowed to 1:
// the gate widens when it stands still while callers queue. Without that, a
// narrow gate kept the second caller queued until both deadlines passed.
func TestGateAdmitsCallsThatWaitForEachOther(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []txretry.Option
	}{
		{"default manager", nil},
		{"NewContentionManager(0)", []txretry.Option{txretry.WithContentionManager(newManager(t, 0))}},
		{"zero ContentionManager", []txretry.Option{txretry.WithContentionManager(&txretry.ContentionManager{})}},
		{"closed at width 1", []txretry.Option{txretry.WithContentionManager(closedManager(t, "wait")), txretry.WithLabel("wait")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := (&fakedb.Driver{}).DB()
			defer db.Close()
			const n = 8
			var arrived atomic.Int32
			all := make(chan struct{})
			errs := make(chan error, n)
			for range n {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					errs <- txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
						if arrived.Add(1) == n {
							close(all)
						}
						select { // until every call's transaction is open
						case <-all:
							return nil
						case <-ctx.Done():
							return ctx.Err()
						}
					}, tc.opts...)
				}()
			}
			for range n {
				if err := <-errs; err != nil {
					t.Fatalf("a call whose fn waits for the others: %v", err)
				}
			}
		})
	}
}

// closedManager returns a manager whose domain label has closed its gate.
func closedManager(t *testing.T, label string) *txretry.ContentionManager {
	t.Helper()
	m := newManager(t, 0)
	closeGate(t, m, label)
	return m
}

func TestContentionManagerWaitEndsWithTheContext(t *testing.T) {
	m := closedManager(t, "hot")
	f := newFixture(t, &fakedb.Driver{})
	release := make(chan struct{})
	_, holderDone := gateHolder(t, f.db, m, release)
	defer func() { close(release); <-holderDone }()

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- txretry.RunInTx(ctx, f.db, func(context.Context, *sql.Tx) error { return nil }, txretry.WithContentionManager(m), txretry.WithLabel("hot"))
	}()
	waitQueued(t, m, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if m.Queued() != 0 {
		t.Fatal("a cancelled caller stayed in the queue")
	}
}

func TestContentionManagerWaitEndsAtTheDeadline(t *testing.T) {
	m := closedManager(t, "hot")
	f := newFixture(t, &fakedb.Driver{})
	release := make(chan struct{})
	_, holderDone := gateHolder(t, f.db, m, release)
	defer func() { close(release); <-holderDone }()

	err := txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { return nil },
		txretry.WithContentionManager(m), txretry.WithLabel("hot"), txretry.WithTimeBudget(20*time.Millisecond))
	var re *txretry.RetryError
	if !errors.Is(err, txretry.ErrRetriesExhausted) || !errors.As(err, &re) || re.Reason != "time budget" || re.Attempts != 0 {
		t.Fatalf("err = %v, want exhaustion by the time budget before any attempt", err)
	}
}

func TestNestedCallOnAnotherHandleDoesNotQueueAgain(t *testing.T) {
	m := closedManager(t, "hot")
	f := newFixture(t, &fakedb.Driver{})
	g := newFixture(t, &fakedb.Driver{})
	done := make(chan error, 1)
	go func() {
		done <- txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
			return txretry.RunInTx(ctx, g.db, func(context.Context, *sql.Tx) error { return nil }, txretry.WithContentionManager(m), txretry.WithLabel("hot"))
		}, txretry.WithContentionManager(m), txretry.WithLabel("hot"))
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nested call deadlocked on the gate its outer call holds")
	}
}

func TestContentionManagerValidation(t *testing.T) {
	if _, err := txretry.NewContentionManager(-1); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Fatalf("err = %v, want ErrInvalidOption", err)
	}
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	err := txretry.RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error { return nil }, txretry.WithContentionManager(nil))
	if !errors.Is(err, txretry.ErrInvalidOption) {
		t.Fatalf("err = %v, want ErrInvalidOption", err)
	}
}

// A panic in fn must not keep the gate's place.
func TestPanicLeavesTheGate(t *testing.T) {
	m := closedManager(t, "hot")
	f := newFixture(t, &fakedb.Driver{})
	func() {
		defer func() { _ = recover() }()
		_ = txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { panic("boom") }, txretry.WithContentionManager(m), txretry.WithLabel("hot"))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := txretry.RunInTx(ctx, f.db, func(context.Context, *sql.Tx) error { return nil }, txretry.WithContentionManager(m), txretry.WithLabel("hot")); err != nil {
		t.Fatalf("err = %v: the panicking call kept its place in the gate", err)
	}
}

// An observer that panics on AttemptStarted (after admission) must not keep
// the gate's place.
func TestObserverPanicLeavesTheGate(t *testing.T) {
	m := closedManager(t, "hot")
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	bad := txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
		if e.Kind == txretry.AttemptStarted {
			panic("observer bug")
		}
	})
	_ = noPanic(t, func() error {
		return txretry.RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error { return nil },
			txretry.WithContentionManager(m), txretry.WithLabel("hot"), txretry.WithObserver(bad))
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := txretry.RunInTx(ctx, db, func(context.Context, *sql.Tx) error { return nil }, txretry.WithContentionManager(m), txretry.WithLabel("hot")); err != nil {
		t.Fatalf("err = %v: the call whose observer panicked kept its place in the gate", err)
	}
}
