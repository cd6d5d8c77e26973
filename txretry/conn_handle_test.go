package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// A *sql.Conn is a handle like *sql.DB: a nested call on it joins the
// outer call's transaction.
func TestConnHandleNestedCallJoins(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	conn, err := f.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var outer, inner *sql.Tx
	err = txretry.RunInTx(context.Background(), conn, func(ctx context.Context, tx *sql.Tx) error {
		outer = tx
		return txretry.RunInTx(ctx, conn, func(_ context.Context, tx *sql.Tx) error {
			inner = tx
			return nil
		}, f.opts()...)
	}, f.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	if inner != outer || f.drv.Stats().Begins != 1 || f.drv.Stats().Commits != 1 {
		t.Fatalf("inner tx %p, outer %p, %d begins, %d commits: the nested call must join", inner, outer, f.drv.Stats().Begins, f.drv.Stats().Commits)
	}
}

// On a *sql.Conn the connection lost with the commit is the handle's only
// one: a built-in verifier cannot probe through it, fails at once and says
// why, and the result stays uncertain (fn is not run again).
func TestConnHandleBuiltInVerifierFailsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  txretry.Option
	}{
		{"commit marker", txretry.WithCommitMarker("app.markers")},
		{"xact status", txretry.WithXactStatusVerification()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{
				OnCommit: lostFirstCommit,
				OnBegin: func(_ context.Context, n int, _ driver.TxOptions) error {
					if n > 1 { // the connection went with the commit
						return io.ErrUnexpectedEOF
					}
					return nil
				},
				OnQuery: func(context.Context, int, string, []driver.NamedValue) ([]string, [][]driver.Value, error) {
					return []string{"xid"}, [][]driver.Value{{"1234"}}, nil // pg_current_xact_id_if_assigned
				},
			})
			conn, err := f.db.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var calls atomic.Int32
			err = txretry.RunInTx(context.Background(), conn, execFn(&calls), f.opts(tc.opt)...)
			if !errors.Is(err, txretry.ErrCommitUncertain) || !strings.Contains(err.Error(), "single connection") {
				t.Fatalf("err = %v, want ErrCommitUncertain saying the handle is a single connection", err)
			}
			if calls.Load() != 1 {
				t.Fatalf("fn ran %d times, want 1", calls.Load())
			}
			if len(f.clock.Waits()) != 0 {
				t.Fatalf("waited %v: the verifier must fail at once, not retry", f.clock.Waits())
			}
		})
	}
}

// A *sql.Conn gets a default contention manager of its own, apart from its
// *sql.DB's: conflicts on the connection space its domain (the first retry
// waits the backoff, 2 ms, longer than the 1 ms spacing; the next goes at
// once to run alone), and that does not carry over to the pool, whose
// first conflict waits the backoff.
func TestConnHandleHasItsOwnContentionManager(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(2, errSerialization)})
	conn, err := f.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var calls atomic.Int32
	opts := []txretry.Option{txretry.WithClock(f.clock), txretry.WithRand(func() float64 { return 1 })}
	if err := txretry.RunInTx(context.Background(), conn, execFn(&calls), opts...); err != nil {
		t.Fatal(err)
	}
	onConn := f.clock.Waits()
	if len(onConn) != 2 || onConn[0] != 2*time.Millisecond || onConn[1] > 500*time.Microsecond || onConn[1] <= 0 {
		t.Fatalf("waits on the conn %v, want the backoff's 2ms, then at once (at most 500µs)", onConn)
	}
	// The pool's manager has seen no conflict: its domain is open.
	f.drv.OnExec = failFirst(4, errSerialization) // execs 1-3 ran on the conn: the pool's first exec fails
	if err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), opts...); err != nil {
		t.Fatal(err)
	}
	if got := f.clock.Waits()[2:]; len(got) != 1 || got[0] != 2*time.Millisecond {
		t.Fatalf("wait on the pool %v, want the backoff's 2ms: the conn's closed gate must not carry over", got)
	}
}
