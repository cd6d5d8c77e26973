package txretry_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// Calls that share a key never run their attempts at the same time; calls
// with disjoint keys do.
func TestContentionKeysSerializeOnlyOverlappingCalls(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	m := newManager(t, 1) // a gate of width 1 would serialize everything
	var inA, maxA, inAll, maxAll atomic.Int32
	bump := func(in, peak *atomic.Int32) {
		n := in.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
	}
	var wg sync.WaitGroup
	for i := range 8 {
		keys := []string{"a", fmt.Sprint("own", i)} // even: shares "a"
		if i%2 == 1 {
			keys = []string{fmt.Sprint("own", i)}
		}
		wg.Go(func() {
			for range 5 {
				err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
					shared := i%2 == 0
					if shared {
						bump(&inA, &maxA)
						defer inA.Add(-1)
					}
					bump(&inAll, &maxAll)
					defer inAll.Add(-1)
					time.Sleep(2 * time.Millisecond)
					return nil
				}, txretry.WithContentionManager(m), txretry.WithContentionKeys(keys...))
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if maxA.Load() != 1 {
		t.Errorf("%d calls holding key a ran at once, want 1", maxA.Load())
	}
	if maxAll.Load() < 2 {
		t.Errorf("at most %d call ran at once, want calls with disjoint keys to overlap", maxAll.Load())
	}
}

// Keys are taken in one order whatever order the caller lists them in, so
// calls with {x, y} and {y, x} cannot wait for each other forever.
func TestContentionKeysCannotDeadlock(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for i := range 8 {
			keys := []string{"x", "y", "x"}
			if i%2 == 1 {
				keys = []string{"y", "x"}
			}
			wg.Go(func() {
				for range 20 {
					if err := txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error {
						time.Sleep(100 * time.Microsecond)
						return nil
					}, txretry.WithContentionKeys(keys...)); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("calls with the same keys in opposite orders did not finish")
	}
}

// A caller that gives up while waiting for a key leaves no key behind.
func TestContentionKeysWaitEndsWithTheContext(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	m := newManager(t, 0)
	holding := make(chan struct{})
	release := make(chan struct{})
	go func() {
		_ = txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error {
			close(holding)
			<-release
			return nil
		}, txretry.WithContentionManager(m), txretry.WithContentionKeys("k"))
	}()
	<-holding
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var calls atomic.Int32
	err := txretry.RunInTx(ctx, f.db, execFn(&calls), txretry.WithContentionManager(m), txretry.WithContentionKeys("j", "k"))
	if !errors.Is(err, txretry.ErrRetriesExhausted) && !errors.Is(err, context.DeadlineExceeded) || calls.Load() != 0 {
		t.Fatalf("err = %v after %d calls of fn, want the deadline and none", err, calls.Load())
	}
	close(release)
	// Both keys are free again: "j", which the waiter took, and "k".
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := txretry.RunInTx(ctx2, f.db, execFn(&calls), txretry.WithContentionManager(m), txretry.WithContentionKeys("j", "k")); err != nil {
		t.Fatalf("a later call on the same keys: %v", err)
	}
}

func TestContentionKeysNeedAManager(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	var calls atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), txretry.WithoutContentionManager(), txretry.WithContentionKeys("k"))
	if !errors.Is(err, txretry.ErrInvalidOption) || calls.Load() != 0 {
		t.Fatalf("err = %v after %d calls, want ErrInvalidOption and none", err, calls.Load())
	}
}

// Keys never widen as the gate does: of two calls that share a key and
// whose fns wait for each other, the second never gets the key, and both end
// at their deadlines.
func TestContentionKeysDoNotAdmitCallsThatWaitForEachOther(t *testing.T) {
	db := (&fakedb.Driver{}).DB()
	defer db.Close()
	m := newManager(t, 0)
	var runs atomic.Int32
	first := make(chan struct{})
	both := make(chan struct{})
	call := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			if runs.Add(1) == 1 {
				close(first)
			} else {
				close(both)
			}
			select { // until the other call's transaction is open too
			case <-both:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, txretry.WithContentionManager(m), txretry.WithContentionKeys("k"))
	}
	errA := make(chan error, 1)
	go func() { errA <- call(300 * time.Millisecond) }()
	<-first
	// The second call's deadline comes before the first one's.
	if err := call(100 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second call: err = %v, want its deadline while waiting for the key", err)
	}
	if err := <-errA; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first call: err = %v, want its deadline while its fn waited", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want once: the second call never got the key", n)
	}
}
