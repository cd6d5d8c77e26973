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
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// TestEveryOutcomeLeavesTheGate: whichever way a call ends, it gives its
// place in the contention gate back. With a gate one wide, a call that kept
// its place would block every later call on it.
func TestEveryOutcomeLeavesTheGate(t *testing.T) {
	lostCommit := func(int) error { return errors.New("invalid connection") }
	for _, tc := range []struct {
		name string
		drv  *fakedb.Driver
		fn   func(context.Context, *sql.Tx) error
		opts []txretry.Option
	}{
		{"committed", &fakedb.Driver{}, nil, nil},
		{"fn's error", &fakedb.Driver{}, func(context.Context, *sql.Tx) error { return errDomain }, nil},
		{"permanent database error", &fakedb.Driver{OnExec: failFirst(1000, errUnique)}, nil, nil},
		{"BEGIN failed", &fakedb.Driver{OnBegin: func(context.Context, int, driver.TxOptions) error { return errLockNA }}, nil, nil},
		{"exhausted", &fakedb.Driver{OnExec: failFirst(1000, errSerialization)}, nil, []txretry.Option{txretry.WithMaxAttempts(3)}},
		{"uncertain", &fakedb.Driver{OnCommit: lostCommit}, nil, nil},
		{"verified not committed, then exhausted", &fakedb.Driver{OnCommit: lostCommit}, nil,
			[]txretry.Option{txretry.WithMaxAttempts(2), txretry.WithVerify(func(context.Context) (bool, error) { return false, nil })}},
		{"verified committed", &fakedb.Driver{OnCommit: lostCommit}, nil,
			[]txretry.Option{txretry.WithVerify(func(context.Context) (bool, error) { return true, nil })}},
		{"attempt timed out", &fakedb.Driver{}, func(ctx context.Context, _ *sql.Tx) error { <-ctx.Done(); return ctx.Err() },
			[]txretry.Option{txretry.WithAttemptTimeout(time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := closedManager(t, "hot")
			f := newFixture(t, tc.drv)
			fn := tc.fn
			if fn == nil {
				var calls atomic.Int32
				fn = execFn(&calls)
			}
			opts := append([]txretry.Option{txretry.WithClock(f.clock), txretry.WithContentionManager(m), txretry.WithLabel("hot")}, tc.opts...)
			for i := range 3 { // more calls than the gate is wide
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := txretry.RunInTx(ctx, f.db, fn, opts...)
				blocked := ctx.Err() != nil
				cancel()
				if blocked {
					t.Fatalf("call %d: %v: an earlier call kept its place in the gate", i+1, err)
				}
			}
			if q := m.Queued(); q != 0 {
				t.Fatalf("%d caller(s) still queued", q)
			}
		})
	}
}
