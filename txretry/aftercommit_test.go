package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// hookLog records the hooks that ran, in order.
type hookLog struct {
	mu  sync.Mutex
	ran []string
}

// hook returns a hook that records name.
func (l *hookLog) hook(name string) func(context.Context) {
	return func(context.Context) {
		l.mu.Lock()
		l.ran = append(l.ran, name)
		l.mu.Unlock()
	}
}

func (l *hookLog) want(t *testing.T, want ...string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Equal(l.ran, want) {
		t.Fatalf("hooks ran %q, want %q", l.ran, want)
	}
}

// registerAll returns a fn that registers hooks named after the attempt
// and each of names, then runs one statement.
func registerAll(l *hookLog, names ...string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		for _, name := range names {
			txretry.AfterCommit(ctx, l.hook(fmt.Sprint(name, txretry.Attempt(ctx))))
		}
		_, err := tx.ExecContext(ctx, "UPDATE t SET v = v + 1")
		return err
	}
}

// Hooks run once, in order, after the final COMMIT and before RunInTx
// returns; the hooks of attempts that failed (in fn or at COMMIT) are
// dropped.
func TestAfterCommitDroppedOnRetry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		drv     *fakedb.Driver
		commits int // before the hooks run
	}{
		{"fn fails", &fakedb.Driver{OnExec: failFirst(2, errSerialization)}, 1},
		{"COMMIT fails", &fakedb.Driver{OnCommit: func(n int) error {
			if n <= 2 {
				return errSerialization
			}
			return nil
		}}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.drv)
			var l hookLog
			fn := registerAll(&l, "a", "b", "c")
			err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
				txretry.AfterCommit(ctx, func(context.Context) {
					if got := tc.drv.Stats().Commits; got != tc.commits {
						t.Errorf("a hook ran after %d COMMITs, want %d", got, tc.commits)
					}
				})
				return fn(ctx, tx)
			}, f.opts()...)
			if err != nil {
				t.Fatal(err)
			}
			l.want(t, "a3", "b3", "c3")
		})
	}
}

// No hook runs when the call fails: fn's error, exhaustion, an uncertain
// commit, an idempotency key committed by another call.
func TestAfterCommitNotRunOnError(t *testing.T) {
	lost := func(int) error { return io.ErrUnexpectedEOF } // the connection dropped in COMMIT
	for _, tc := range []struct {
		name string
		drv  func() *fakedb.Driver
		opts []txretry.Option
		want error
	}{
		{"permanent", func() *fakedb.Driver { return &fakedb.Driver{OnExec: failFirst(1, errDomain)} }, nil, errDomain},
		{"exhausted", func() *fakedb.Driver { return &fakedb.Driver{OnExec: failFirst(9, errSerialization)} },
			[]txretry.Option{txretry.WithMaxAttempts(3)}, txretry.ErrRetriesExhausted},
		{"uncertain", func() *fakedb.Driver { return &fakedb.Driver{OnCommit: lost} }, nil, txretry.ErrCommitUncertain},
		{"verifier error", func() *fakedb.Driver { return &fakedb.Driver{OnCommit: lost} },
			[]txretry.Option{txretry.WithVerify(func(context.Context) (bool, error) { return false, errDomain }), txretry.WithVerifyTimeout(1)},
			txretry.ErrCommitUncertain},
		{"key committed by another call", func() *fakedb.Driver {
			// The first attempt's COMMIT fails; meanwhile another call
			// commits the key, which the second attempt's insert finds.
			keys := 0
			return &fakedb.Driver{
				OnCommit: func(int) error { return errSerialization },
				OnExec: func(_ context.Context, _ int, q string, _ []driver.NamedValue) error {
					if strings.HasPrefix(q, "INSERT INTO idem_keys") {
						if keys++; keys > 1 {
							return errUnique
						}
					}
					return nil
				},
			}
		}, []txretry.Option{txretry.WithIdempotencyKey("idem_keys", "k1")}, txretry.ErrAlreadyCommitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.drv())
			var l hookLog
			err := txretry.RunInTx(context.Background(), f.db, registerAll(&l, "a"), f.opts(tc.opts...)...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			l.want(t)
		})
	}
}

// A lost COMMIT that the verifier finds committed is a commit: the hooks
// run; one it finds not committed is retried, and the hooks of the
// attempt are dropped.
func TestAfterCommitVerified(t *testing.T) {
	for _, committed := range []bool{true, false} {
		t.Run(fmt.Sprint("committed=", committed), func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnCommit: func(n int) error {
				if n == 1 {
					return io.ErrUnexpectedEOF
				}
				return nil
			}})
			var l hookLog
			verify := txretry.WithVerify(func(context.Context) (bool, error) { return committed, nil })
			if err := txretry.RunInTx(context.Background(), f.db, registerAll(&l, "a"), f.opts(verify)...); err != nil {
				t.Fatal(err)
			}
			if committed {
				l.want(t, "a1")
			} else {
				l.want(t, "a2")
			}
		})
	}
}

// A hook gets the caller's values without its cancellation, on the
// caller's goroutine, and runs before RunInTx returns.
func TestAfterCommitContext(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	type key struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	defer cancel()
	ran := false
	err := txretry.RunInTx(ctx, f.db, func(ctx context.Context, tx *sql.Tx) error {
		txretry.AfterCommit(ctx, func(hctx context.Context) {
			ran = true // unsynchronized: the race detector checks it is the caller's goroutine
			if hctx.Value(key{}) != "v" || hctx.Err() != nil || hctx.Done() != nil {
				t.Errorf("hook's context: value %v, err %v", hctx.Value(key{}), hctx.Err())
			}
			if txretry.Attempt(hctx) != 0 {
				t.Error("the hook's context is inside the attempt")
			}
		})
		cancel() // COMMIT does not observe it, nor does the hook
		return nil
	}, f.opts()...)
	if err != nil || !ran {
		t.Fatalf("err = %v, hook ran: %v", err, ran)
	}
}

// A nested call that joined the outer transaction registers with the
// outermost call: dropped with its attempt, run after its commit. A call on
// another handle runs its hooks at its own commit, even if the enclosing
// transaction then rolls back.
func TestAfterCommitNested(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnCommit: func(n int) error {
		if n == 1 {
			return errSerialization // the outer call's first attempt
		}
		return nil
	}})
	other := newFixture(t, &fakedb.Driver{})
	var l hookLog
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		n := txretry.Attempt(ctx)
		txretry.AfterCommit(ctx, l.hook(fmt.Sprint("outer", n)))
		if err := txretry.RunInTx(ctx, f.db, func(ctx context.Context, tx *sql.Tx) error {
			txretry.AfterCommit(ctx, l.hook(fmt.Sprint("joined", n)))
			return nil
		}); err != nil {
			return err
		}
		if err := txretry.RunInTx(ctx, other.db, func(ctx context.Context, tx *sql.Tx) error {
			txretry.AfterCommit(ctx, l.hook(fmt.Sprint("other", n)))
			return nil
		}, other.opts()...); err != nil {
			return err
		}
		l.mu.Lock()
		if got := len(l.ran); got != n {
			t.Errorf("attempt %d: %d hook(s) ran before the outer commit, want the other handle's %d", n, got, n)
		}
		l.mu.Unlock()
		txretry.AfterCommit(ctx, l.hook(fmt.Sprint("last", n)))
		return nil
	}, f.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	l.want(t, "other1", "other2", "outer2", "joined2", "last2")
}

// Outside any call, f runs at once, without the context's cancellation;
// a nil context counts as outside and a nil f is ignored.
func TestAfterCommitOutsideCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := 0
	txretry.AfterCommit(ctx, func(ctx context.Context) {
		if ctx.Err() != nil {
			t.Error("the hook's context is cancelled")
		}
		ran++
	})
	txretry.AfterCommit(nil, func(ctx context.Context) { //nolint:staticcheck // testing bad input
		if ctx == nil {
			t.Error("nil context")
		}
		ran++
	})
	if ran != 2 {
		t.Fatalf("%d of 2 hooks ran at once", ran)
	}
	txretry.AfterCommit(ctx, nil)
	f := newFixture(t, &fakedb.Driver{})
	if err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		txretry.AfterCommit(ctx, nil)
		return nil
	}, f.opts()...); err != nil {
		t.Fatal(err)
	}
}

// Registrations from goroutines of fn all count; one after fn returned is
// ignored.
func TestAfterCommitGoroutines(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	var l hookLog
	var late context.Context
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() { txretry.AfterCommit(ctx, l.hook("g")) })
		}
		wg.Wait()
		late = ctx
		return nil
	}, f.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	txretry.AfterCommit(late, l.hook("late"))
	l.want(t, "g", "g", "g", "g", "g", "g", "g", "g")
}

// A panicking hook: the transaction stays committed and its connection
// released, the other hooks still run, and the panic goes on out of
// RunInTx; of several, recover sees the last, as with deferred calls.
func TestAfterCommitPanic(t *testing.T) {
	for _, panics := range [][]string{{"b"}, {"a", "c"}} {
		t.Run(strings.Join(panics, ","), func(t *testing.T) {
			drv := &fakedb.Driver{}
			f := newFixture(t, drv)
			var l hookLog
			var got any
			func() {
				defer func() { got = recover() }()
				_ = txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
					for _, name := range []string{"a", "b", "c"} {
						txretry.AfterCommit(ctx, func(ctx context.Context) {
							l.hook(name)(ctx)
							if slices.Contains(panics, name) {
								panic(name)
							}
						})
					}
					return nil
				}, f.opts()...)
			}()
			if want := panics[len(panics)-1]; got != want {
				t.Fatalf("recovered %v, want %v", got, want)
			}
			l.want(t, "a", "b", "c")
			if s := drv.Stats(); s.Commits != 1 || s.Rollbacks != 0 {
				t.Fatalf("%d commits, %d rollbacks", s.Commits, s.Rollbacks)
			}
		})
	}
}
