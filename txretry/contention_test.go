package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
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

func TestContentionManagerWidthAdapts(t *testing.T) {
	m := newManager(t, 0)
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(9, errSerialization)})
	var calls atomic.Int32
	// Nine conflicts in a row narrow the gate.
	err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), txretry.WithClock(f.clock), txretry.WithContentionManager(m))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Width(); got >= txretry.DefaultContentionWidth {
		t.Fatalf("width %v after nine conflicts in a row, want less than %d", got, txretry.DefaultContentionWidth)
	}
	// Calm calls open it fully again, a streak at a time.
	for n := 0; m.Width() < txretry.DefaultContentionWidth; n++ {
		if n == 20_000 {
			t.Fatalf("width %v after %d calls without a conflict", m.Width(), n)
		}
		if err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), txretry.WithClock(f.clock), txretry.WithContentionManager(m)); err != nil {
			t.Fatal(err)
		}
	}
}

// With the default per-handle manager, a conflict among the handle's own
// attempts is spaced by its gate, not by the backoff; a conflict of an
// attempt that ran alone came from elsewhere (another process), and pauses
// the call in its place, doubling from 500 µs while such conflicts last.
func TestContentionManagerIsOnByDefaultPerHandle(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(3, errSerialization)})
	var calls atomic.Int32
	if err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), txretry.WithClock(f.clock), txretry.WithRand(func() float64 { return 1 })); err != nil {
		t.Fatal(err)
	}
	// The pauses shrink a little with the call's age (cmPacePatience).
	got := f.clock.Waits()
	if want := []time.Duration{500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond}; len(got) != len(want) ||
		slices.ContainsFunc(got, func(d time.Duration) bool { return d <= 0 }) ||
		got[0] > want[0] || got[1] > want[1] || got[2] > want[2] || got[1] < want[1]*9/10 || got[2] < want[2]*9/10 {
		t.Fatalf("waits %v, want the manager's pauses %v (shrunk a little with age), not the backoff", got, want)
	}
	// Turning it off brings the backoff back.
	g := newFixture(t, &fakedb.Driver{OnExec: failFirst(2, errSerialization)})
	if err := txretry.RunInTx(context.Background(), g.db, execFn(&calls), txretry.WithClock(g.clock), txretry.WithoutContentionManager(), txretry.WithRand(func() float64 { return 1 })); err != nil {
		t.Fatal(err)
	}
	if got, want := g.clock.Waits(), []time.Duration{2 * time.Millisecond, 4 * time.Millisecond}; !slices.Equal(got, want) {
		t.Fatalf("waits %v, want the default backoff's %v without a manager", got, want)
	}
}

// gateHolder runs a call that holds m's only place until release is closed.
func gateHolder(t *testing.T, db *sql.DB, m *txretry.ContentionManager, release chan struct{}) (entered chan struct{}, done chan error) {
	entered, done = make(chan struct{}), make(chan error, 1)
	go func() {
		done <- txretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
			close(entered)
			<-release
			return nil
		}, txretry.WithContentionManager(m))
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
	m := newManager(t, 1)
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
			}, txretry.WithContentionManager(m))
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
		{"narrowed to 1", []txretry.Option{txretry.WithContentionManager(narrowedManager(t))}},
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

// narrowedManager returns a manager that calm calls opened fully and
// conflicts then narrowed to width 1.
func narrowedManager(t *testing.T) *txretry.ContentionManager {
	t.Helper()
	m := newManager(t, 0)
	calm := newFixture(t, &fakedb.Driver{})
	var calls atomic.Int32
	for n := 0; m.Width() < txretry.DefaultContentionWidth; n++ {
		if n == 1000 {
			t.Fatalf("width %v after %d calls without a conflict", m.Width(), n)
		}
		if err := txretry.RunInTx(context.Background(), calm.db, execFn(&calls), txretry.WithContentionManager(m)); err != nil {
			t.Fatal(err)
		}
	}
	// Conflicts weigh what they lasted against the calm commits, which the
	// race detector and a busy machine vary: count them until the width is 1.
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(math.MaxInt, errSerialization)})
	for n := 0; m.Width() > 1; n++ {
		if n == 1000 {
			t.Fatalf("width %v after %d conflicts in a row", m.Width(), n)
		}
		err := txretry.RunInTx(context.Background(), f.db, execFn(&calls),
			txretry.WithContentionManager(m), txretry.WithMaxAttempts(1))
		if !errors.Is(err, txretry.ErrRetriesExhausted) {
			t.Fatalf("err = %v, want the conflict to exhaust the single attempt", err)
		}
	}
	return m
}

func TestContentionManagerWaitEndsWithTheContext(t *testing.T) {
	m := newManager(t, 1)
	f := newFixture(t, &fakedb.Driver{})
	release := make(chan struct{})
	_, holderDone := gateHolder(t, f.db, m, release)
	defer func() { close(release); <-holderDone }()

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- txretry.RunInTx(ctx, f.db, func(context.Context, *sql.Tx) error { return nil }, txretry.WithContentionManager(m))
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
	m := newManager(t, 1)
	f := newFixture(t, &fakedb.Driver{})
	release := make(chan struct{})
	_, holderDone := gateHolder(t, f.db, m, release)
	defer func() { close(release); <-holderDone }()

	err := txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { return nil },
		txretry.WithContentionManager(m), txretry.WithTimeBudget(20*time.Millisecond))
	var re *txretry.RetryError
	if !errors.Is(err, txretry.ErrRetriesExhausted) || !errors.As(err, &re) || re.Reason != "time budget" || re.Attempts != 0 {
		t.Fatalf("err = %v, want exhaustion by the time budget before any attempt", err)
	}
}

func TestNestedCallOnAnotherHandleDoesNotQueueAgain(t *testing.T) {
	m := newManager(t, 1)
	f := newFixture(t, &fakedb.Driver{})
	g := newFixture(t, &fakedb.Driver{})
	done := make(chan error, 1)
	go func() {
		done <- txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
			return txretry.RunInTx(ctx, g.db, func(context.Context, *sql.Tx) error { return nil }, txretry.WithContentionManager(m))
		}, txretry.WithContentionManager(m))
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

// A conflict that lasted much longer than a commit (a deadlock detected
// after a timeout) is paid back in commits before the gate widens again.
func TestContentionManagerPaysBackExpensiveConflicts(t *testing.T) {
	m := newManager(t, 2)
	var f *fixture
	var slow atomic.Bool
	f = newFixture(t, &fakedb.Driver{OnExec: func(context.Context, int, string, []driver.NamedValue) error {
		if slow.Load() {
			f.clock.Advance(100 * time.Millisecond)
			return errDeadlock
		}
		f.clock.Advance(time.Millisecond)
		return nil
	}})
	call := func() error {
		var n atomic.Int32
		return txretry.RunInTx(context.Background(), f.db, execFn(&n), txretry.WithClock(f.clock), txretry.WithContentionManager(m), txretry.WithMaxAttempts(1))
	}
	if err := call(); err != nil { // a 1 ms commit sets the average
		t.Fatal(err)
	}
	slow.Store(true)
	_ = call() // a 100 ms deadlock: width 2 -> 1, a debt of 100 commits
	slow.Store(false)
	if m.Width() != 1 {
		t.Fatalf("width %v after the conflict, want 1", m.Width())
	}
	for i := 1; i < 100+16; i++ {
		if err := call(); err != nil {
			t.Fatal(err)
		}
		if m.Width() != 1 {
			t.Fatalf("width %v after %d commits, want 1 until the debt (100) and a streak (16) are done", m.Width(), i)
		}
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	if m.Width() != 2 {
		t.Fatalf("width %v after the debt and a streak, want 2", m.Width())
	}
}

// A panic in fn must not keep the gate's place.
func TestPanicLeavesTheGate(t *testing.T) {
	m := newManager(t, 1)
	f := newFixture(t, &fakedb.Driver{})
	func() {
		defer func() { _ = recover() }()
		_ = txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { panic("boom") }, txretry.WithContentionManager(m))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := txretry.RunInTx(ctx, f.db, func(context.Context, *sql.Tx) error { return nil }, txretry.WithContentionManager(m)); err != nil {
		t.Fatalf("err = %v: the panicking call kept its place in the gate", err)
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
