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

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	errSerialization = &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
	errDeadlock      = &fakedb.SQLStateError{Code: "40P01", Message: "deadlock detected"}
	errUnique        = &fakedb.SQLStateError{Code: "23505", Message: "duplicate key value violates unique constraint"}
	errLockNA        = &fakedb.SQLStateError{Code: "55P03", Message: "could not obtain lock"}
	errMySQLDeadlock = &mysql.MySQLError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'}, Message: "Deadlock found"}
	errMySQLLockWait = &mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}
	errDomain        = errors.New("insufficient funds")
)

// fixture is a fake pool plus a fake clock that never sleeps.
type fixture struct {
	t     *testing.T
	drv   *fakedb.Driver
	db    *sql.DB
	clock *fakeClock
}

func newFixture(t *testing.T, drv *fakedb.Driver) *fixture {
	t.Helper()
	f := &fixture{t: t, drv: drv, db: drv.DB(), clock: newFakeClock()}
	// Nothing may sleep while a transaction is open.
	f.clock.onWait = func(time.Duration) {
		if n := drv.Stats().ActiveTx; n != 0 {
			t.Errorf("waiting with %d transaction(s) open", n)
		}
	}
	t.Cleanup(func() {
		if n := f.db.Stats().InUse; n != 0 {
			t.Errorf("%d connection(s) still in use", n)
		}
		f.db.Close()
	})
	return f
}

// opts are the options every fixture call gets: the fake clock, a fixed
// random source, and no contention manager, so that the backoff policy is
// what these tests see (contention_test.go covers the manager).
func (f *fixture) opts(more ...txretry.Option) []txretry.Option {
	return append([]txretry.Option{txretry.WithClock(f.clock), txretry.WithRand(func() float64 { return 0.5 }),
		txretry.WithoutContentionManager()}, more...)
}

// execFn returns a fn that runs one statement and counts its calls.
func execFn(calls *atomic.Int32) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		calls.Add(1)
		_, err := tx.ExecContext(ctx, "UPDATE t SET v = v + 1")
		return err
	}
}

// failFirst returns an exec hook failing the first n execs with err.
func failFirst(n int, err error) func(context.Context, int, string, []driver.NamedValue) error {
	return func(_ context.Context, i int, _ string, _ []driver.NamedValue) error {
		if i <= n {
			return err
		}
		return nil
	}
}

func TestRetriesDefaultClassUntilSuccess(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"40001", errSerialization},
		{"40P01", errDeadlock},
		{"mysql 1213", errMySQLDeadlock},
		{"wrapped 40001", fmtWrap(errSerialization)},
		{"joined 1213", errors.Join(io.EOF, errMySQLDeadlock)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnExec: failFirst(2, tc.err)})
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...)
			if err != nil {
				t.Fatalf("RunInTx: %v", err)
			}
			st := f.drv.Stats()
			if calls.Load() != 3 || st.Begins != 3 || st.Rollbacks != 2 || st.Commits != 1 {
				t.Fatalf("calls=%d begins=%d rollbacks=%d commits=%d, want 3 3 2 1", calls.Load(), st.Begins, st.Rollbacks, st.Commits)
			}
			// Full jitter with rnd 0.5 over 2 ms, 4 ms: 1 ms, 2 ms.
			if got, want := f.clock.Waits(), []time.Duration{time.Millisecond, 2 * time.Millisecond}; !equalDurations(got, want) {
				t.Fatalf("waits %v, want %v", got, want)
			}
		})
	}
}

func fmtWrap(err error) error { return &wrapped{err} }

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "repo: transfer: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestNonRetryableErrorsReturnedUnchangedAfterOneAttempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"unique violation", errUnique},
		{"lock not available", errLockNA},
		{"mysql lock wait timeout", errMySQLLockWait},
		{"domain error", errDomain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnExec: failFirst(1, tc.err)})
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			st := f.drv.Stats()
			if calls.Load() != 1 || st.Begins != 1 || st.Rollbacks != 1 || st.Commits != 0 {
				t.Fatalf("calls=%d begins=%d rollbacks=%d commits=%d, want 1 1 1 0", calls.Load(), st.Begins, st.Rollbacks, st.Commits)
			}
		})
	}
}

func TestFnErrorIsReturnedAsIs(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	err := txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { return errDomain }, f.opts()...)
	if err != errDomain {
		t.Fatalf("err = %#v, want the very value fn returned", err)
	}
}

func TestRetryableErrorAtCommitReRunsTheWholeTransaction(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnCommit: func(n int) error {
		if n == 1 {
			return errSerialization
		}
		return nil
	}})
	var calls atomic.Int32
	if err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 {
		t.Fatalf("fn ran %d times, want 2", calls.Load())
	}
	want := []string{"begin", "exec UPDATE t SET v = v + 1", "commit", "begin", "exec UPDATE t SET v = v + 1", "commit"}
	if got := f.drv.Log(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("log %q, want %q", got, want)
	}
}

func TestExhaustion(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(1000, errSerialization)})
	var calls atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts(txretry.WithMaxAttempts(4))...)
	if !errors.Is(err, txretry.ErrRetriesExhausted) {
		t.Fatalf("err = %v, want ErrRetriesExhausted", err)
	}
	var re *txretry.RetryError
	var pe *fakedb.SQLStateError
	if !errors.As(err, &re) || re.Attempts != 4 || re.Reason != "attempt limit" || !errors.As(err, &pe) || pe.Code != "40001" {
		t.Fatalf("err = %#v, want a RetryError of 4 attempts wrapping the 40001", err)
	}
	if calls.Load() != 4 || len(f.clock.Waits()) != 3 {
		t.Fatalf("fn ran %d times with %d waits, want 4 and 3", calls.Load(), len(f.clock.Waits()))
	}
}

func TestDefaultAttemptLimit(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(1000, errSerialization)})
	var calls atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts()...)
	if !errors.Is(err, txretry.ErrRetriesExhausted) || calls.Load() != txretry.DefaultMaxAttempts {
		t.Fatalf("err = %v after %d calls, want exhaustion after %d", err, calls.Load(), txretry.DefaultMaxAttempts)
	}
}

func TestErrorMessagesCarryCodesNotServerText(t *testing.T) {
	secret := &fakedb.SQLStateError{Code: "40001", Message: "Key (email)=(alice@example.com) conflicts"}
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(1000, secret)})
	var calls atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts(txretry.WithMaxAttempts(2))...)
	if msg := err.Error(); strings.Contains(msg, "alice") || !strings.Contains(msg, "SQLSTATE 40001") {
		t.Fatalf("message %q: want the SQLSTATE and no server text", msg)
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
