package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakeclock"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"go.uber.org/goleak"
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
	clock *fakeclock.Clock
}

func newFixture(t *testing.T, drv *fakedb.Driver) *fixture {
	t.Helper()
	f := &fixture{t: t, drv: drv, db: drv.DB(), clock: &fakeclock.Clock{}}
	// Nothing may sleep while a transaction is open.
	f.clock.OnWait = func(time.Duration) {
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

// failBegins returns a fakedb OnBegin hook failing the first n BEGINs with err.
func failBegins(n int, err error) func(context.Context, int, driver.TxOptions) error {
	return func(_ context.Context, i int, _ driver.TxOptions) error {
		if i <= n {
			return err
		}
		return nil
	}
}

// failFirstCommit is an OnCommit hook that fails the first COMMIT with err.
func failFirstCommit(err error) func(int) error {
	return func(n int) error {
		if n == 1 {
			return err
		}
		return nil
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
