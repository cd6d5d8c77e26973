package txretry_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakeclock"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// optsAdapter records the TxOptions that the engine checks and begins with.
type optsAdapter struct {
	begun, checked *[]txretry.TxOptions
	fn             func(ctx context.Context) error
}

type optsTx struct{}

func (optsTx) Commit(context.Context, time.Duration) error   { return nil }
func (optsTx) Rollback(context.Context, time.Duration) error { return nil }
func (optsTx) Exec(context.Context, string) error            { return nil }

func (a optsAdapter) Begin(_ context.Context, o txretry.TxOptions) (optsTx, error) {
	*a.begun = append(*a.begun, o)
	return optsTx{}, nil
}

func (a optsAdapter) Call(ctx context.Context, _ optsTx) error { return a.fn(ctx) }

func (a optsAdapter) CheckTxOptions(o txretry.TxOptions) error {
	*a.checked = append(*a.checked, o)
	return nil
}

var (
	errLockTimeout = &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout", Routine: "ProcessInterrupts"}
	errNowait      = &pgconn.PgError{Code: "55P03", Message: "could not obtain lock on row", Routine: "heap_lock_tuple"}
)

// TestLockTimeoutDoubles: each attempt that the lock timeout ended doubles
// the next attempt's; serialization failures leave it; only SERIALIZABLE
// and REPEATABLE READ calls with the option ask for one. CheckTxOptions
// sees the option's value.
func TestLockTimeoutDoubles(t *testing.T) {
	ms := time.Millisecond
	serializable := txretry.WithIsolation(sql.LevelSerializable)
	timeouts := []error{errLockTimeout, errLockTimeout, errLockTimeout}
	tests := []struct {
		name    string
		opts    []txretry.Option
		errs    []error // of attempts 1, 2, ...; then nil
		want    []time.Duration
		checked time.Duration
	}{
		{"lock timeouts", []txretry.Option{serializable, txretry.WithLockTimeout(50 * ms)}, timeouts,
			[]time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms}, 50 * ms},
		{"serialization failures", []txretry.Option{serializable, txretry.WithLockTimeout(50 * ms)}, []error{errSerialization, errSerialization, errSerialization},
			[]time.Duration{50 * ms, 50 * ms, 50 * ms, 50 * ms}, 50 * ms},
		{"mixed", []txretry.Option{serializable, txretry.WithLockTimeout(50 * ms)}, []error{errSerialization, errLockTimeout, errSerialization, errLockTimeout},
			[]time.Duration{50 * ms, 50 * ms, 100 * ms, 100 * ms, 200 * ms}, 50 * ms},
		{"repeatable read", []txretry.Option{txretry.WithIsolation(sql.LevelRepeatableRead), txretry.WithLockTimeout(3 * ms)}, timeouts,
			[]time.Duration{3 * ms, 6 * ms, 12 * ms, 24 * ms}, 3 * ms},
		{"snapshot", []txretry.Option{txretry.WithIsolation(sql.LevelSnapshot), txretry.WithLockTimeout(ms)}, timeouts,
			[]time.Duration{ms, 2 * ms, 4 * ms, 8 * ms}, ms},
		{"read committed", []txretry.Option{txretry.WithIsolation(sql.LevelReadCommitted), txretry.WithLockTimeout(50 * ms)}, []error{errSerialization},
			make([]time.Duration, 2), 50 * ms},
		{"server default level", []txretry.Option{txretry.WithLockTimeout(50 * ms)}, []error{errSerialization},
			make([]time.Duration, 2), 50 * ms},
		{"no option", []txretry.Option{serializable}, []error{errSerialization},
			make([]time.Duration, 2), 0},
		{"turned off", []txretry.Option{serializable, txretry.WithLockTimeout(50 * ms), txretry.WithLockTimeout(0)}, []error{errSerialization},
			make([]time.Duration, 2), 0},
		{"stops doubling at an hour", []txretry.Option{serializable, txretry.WithLockTimeout(40 * time.Minute)}, timeouts,
			[]time.Duration{40 * time.Minute, 80 * time.Minute, 80 * time.Minute, 80 * time.Minute}, 40 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var begun, checked []txretry.TxOptions
			a := optsAdapter{begun: &begun, checked: &checked, fn: func(ctx context.Context) error {
				if n := txretry.Attempt(ctx); n <= len(tt.errs) {
					return tt.errs[n-1]
				}
				return nil
			}}
			opts := append([]txretry.Option{txretry.WithClock(&fakeclock.Clock{})}, tt.opts...)
			if err := txretry.Run(context.Background(), a, opts...); err != nil {
				t.Fatalf("Run: %v", err)
			}
			var got []time.Duration
			for _, o := range begun {
				got = append(got, o.LockTimeout)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("lock timeouts of attempts 1-%d = %v, want %v", len(tt.want), got, tt.want)
			}
			if len(checked) != 1 || checked[0].LockTimeout != tt.checked {
				t.Errorf("CheckTxOptions saw %+v, want one check with LockTimeout %v", checked, tt.checked)
			}
		})
	}
}

// TestLockTimeoutRetried: the 55P03 of a lock timeout the attempt set is
// retried; without one set, and NOWAIT's 55P03 always, it is returned.
func TestLockTimeoutRetried(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		opts     []txretry.Option
		attempts int
		wantErr  error
	}{
		{"lock timeout it set", errLockTimeout, []txretry.Option{txretry.WithIsolation(sql.LevelSerializable), txretry.WithLockTimeout(50 * time.Millisecond)}, 2, nil},
		{"lock timeout, wrapped", errors.Join(errDomain, errLockTimeout), []txretry.Option{txretry.WithIsolation(sql.LevelSerializable), txretry.WithLockTimeout(50 * time.Millisecond)}, 2, nil},
		{"none set", errLockTimeout, []txretry.Option{txretry.WithIsolation(sql.LevelSerializable)}, 1, errLockTimeout},
		{"none set at read committed", errLockTimeout, []txretry.Option{txretry.WithIsolation(sql.LevelReadCommitted), txretry.WithLockTimeout(50 * time.Millisecond)}, 1, errLockTimeout},
		{"NOWAIT", errNowait, []txretry.Option{txretry.WithIsolation(sql.LevelSerializable), txretry.WithLockTimeout(50 * time.Millisecond)}, 1, errNowait},
		{"retried with a classifier of the caller's", errLockTimeout, []txretry.Option{txretry.WithIsolation(sql.LevelSerializable), txretry.WithLockTimeout(50 * time.Millisecond),
			txretry.WithClassifier(func(error) bool { return false })}, 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var begun, checked []txretry.TxOptions
			a := optsAdapter{begun: &begun, checked: &checked, fn: func(ctx context.Context) error {
				if txretry.Attempt(ctx) == 1 {
					return tt.err
				}
				return nil
			}}
			opts := append([]txretry.Option{txretry.WithClock(&fakeclock.Clock{})}, tt.opts...)
			err := txretry.Run(context.Background(), a, opts...)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Run = %v, want %v", err, tt.wantErr)
			}
			if len(begun) != tt.attempts {
				t.Errorf("%d attempts, want %d", len(begun), tt.attempts)
			}
		})
	}
}

func TestLockTimeoutNegativeIsInvalid(t *testing.T) {
	var begun, checked []txretry.TxOptions
	a := optsAdapter{begun: &begun, checked: &checked, fn: func(context.Context) error { return nil }}
	err := txretry.Run(context.Background(), a, txretry.WithLockTimeout(-time.Millisecond))
	if !errors.Is(err, txretry.ErrInvalidOption) || len(begun) != 0 {
		t.Errorf("Run = %v after %d attempts; want ErrInvalidOption before any", err, len(begun))
	}
}

// TestLockTimeoutNeedsAKnownDriver: RunInTx over database/sql sets the lock
// timeout with PostgreSQL's statement, so it refuses the option for a
// driver whose database it does not know, before any BEGIN.
func TestLockTimeoutNeedsAKnownDriver(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	err := txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { return nil },
		f.opts(txretry.WithIsolation(sql.LevelSerializable), txretry.WithLockTimeout(50*time.Millisecond))...)
	if !errors.Is(err, txretry.ErrInvalidOption) {
		t.Fatalf("RunInTx = %v, want ErrInvalidOption", err)
	}
	if n := f.drv.Stats().Begins; n != 0 {
		t.Errorf("%d BEGINs, want none", n)
	}
	// Without the option, or with it off, the same driver is fine.
	err = txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { return nil },
		f.opts(txretry.WithIsolation(sql.LevelSerializable), txretry.WithLockTimeout(0))...)
	if err != nil {
		t.Errorf("RunInTx with WithLockTimeout(0) = %v", err)
	}
}

// handleAdapter is optsAdapter with a database handle, so that its calls
// share the handle's default contention manager.
type handleAdapter struct {
	optsAdapter
	h *int
}

func (a handleAdapter) Handle() any { return a.h }

// TestLockTimeoutArmedByLongLockWaits: without WithLockTimeout, a handle's
// manager arms DefaultLockTimeout for its SERIALIZABLE and REPEATABLE READ
// calls once an attempt of at least DefaultLockTimeout ended in a
// serialization failure, a deadlock or its caller's context (an attempt a
// lock timeout would have cost no more), and disarms a
// minute after the last such attempt or lock timeout.
func TestLockTimeoutArmedByLongLockWaits(t *testing.T) {
	ms := time.Millisecond
	serializable := txretry.WithIsolation(sql.LevelSerializable)
	tests := []struct {
		name  string
		first time.Duration // how long the first call's attempt lasts
		err   error         // what it ends with; nil: the caller's context ends
		later time.Duration // from the first call to the second
		opts  []txretry.Option
		other bool // the second call is on another handle
		want  time.Duration
	}{
		{"cut by the context", 300 * ms, nil, 0, []txretry.Option{serializable}, false, txretry.DefaultLockTimeout},
		{"a deadlock after a second", time.Second, errDeadlock, 0, []txretry.Option{serializable}, false, txretry.DefaultLockTimeout},
		{"a serialization failure after 50 ms", 50 * ms, errSerialization, 0, []txretry.Option{serializable}, false, txretry.DefaultLockTimeout},
		{"cut after 50 ms", 50 * ms, nil, 0, []txretry.Option{serializable}, false, txretry.DefaultLockTimeout},
		{"repeatable read", 300 * ms, nil, 0, []txretry.Option{txretry.WithIsolation(sql.LevelRepeatableRead)}, false, txretry.DefaultLockTimeout},
		{"a short cut", 49 * ms, nil, 0, []txretry.Option{serializable}, false, 0},
		{"a short deadlock", 49 * ms, errDeadlock, 0, []txretry.Option{serializable}, false, 0},
		{"a short serialization failure", 49 * ms, errSerialization, 0, []txretry.Option{serializable}, false, 0},
		{"a long error that is not a conflict", time.Second, errors.New("boom"), 0, []txretry.Option{serializable}, false, 0},
		{"a minute later", 300 * ms, nil, time.Minute, []txretry.Option{serializable}, false, 0},
		{"just within the minute", 300 * ms, nil, time.Minute - ms, []txretry.Option{serializable}, false, txretry.DefaultLockTimeout},
		{"read committed", 300 * ms, nil, 0, []txretry.Option{txretry.WithIsolation(sql.LevelReadCommitted)}, false, 0},
		{"turned off", 300 * ms, nil, 0, []txretry.Option{serializable, txretry.WithLockTimeout(0)}, false, 0},
		{"chosen", 300 * ms, nil, 0, []txretry.Option{serializable, txretry.WithLockTimeout(ms)}, false, ms},
		{"another handle", 300 * ms, nil, 0, []txretry.Option{serializable}, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeclock.Clock{}
			var begun, checked []txretry.TxOptions
			first := handleAdapter{optsAdapter{begun: &begun, checked: &checked}, new(int)}
			ctx, cancel := context.WithCancel(context.Background())
			first.fn = func(context.Context) error {
				clk.Advance(tt.first)
				if tt.err != nil {
					return tt.err
				}
				cancel()
				return ctx.Err()
			}
			_ = txretry.Run(ctx, first, txretry.WithClock(clk), serializable, txretry.WithMaxAttempts(1))
			cancel()
			clk.Advance(tt.later)

			second := handleAdapter{optsAdapter{begun: &begun, checked: &checked, fn: func(context.Context) error { return nil }}, first.h}
			if tt.other {
				second.h = new(int)
			}
			begun = nil
			if err := txretry.Run(context.Background(), second, append([]txretry.Option{txretry.WithClock(clk)}, tt.opts...)...); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if len(begun) != 1 || begun[0].LockTimeout != tt.want {
				t.Errorf("the second call began with %+v; want LockTimeout %v", begun, tt.want)
			}
		})
	}
}

// TestLockTimeoutStaysArmedWhileItFires: the armed default applies to the
// rest of the call that armed it, and every lock timeout it sets off keeps
// it armed for another minute.
func TestLockTimeoutStaysArmedWhileItFires(t *testing.T) {
	clk := &fakeclock.Clock{}
	opts := []txretry.Option{txretry.WithClock(clk), txretry.WithIsolation(sql.LevelSerializable)}
	var begun, checked []txretry.TxOptions
	h := new(int)
	run := func(fn func(ctx context.Context) error) {
		t.Helper()
		begun = nil
		a := handleAdapter{optsAdapter{begun: &begun, checked: &checked, fn: fn}, h}
		if err := txretry.Run(context.Background(), a, opts...); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	// A deadlock found after a second arms it for the call's next attempt.
	run(func(ctx context.Context) error {
		if txretry.Attempt(ctx) == 1 {
			clk.Advance(time.Second)
			return errDeadlock
		}
		return nil
	})
	if len(begun) != 2 || begun[0].LockTimeout != 0 || begun[1].LockTimeout != txretry.DefaultLockTimeout {
		t.Fatalf("attempts began with %+v; want no lock timeout, then the default", begun)
	}
	// 50 s later a lock timeout fires (retried, doubled) ...
	clk.Advance(50 * time.Second)
	run(func(ctx context.Context) error {
		if txretry.Attempt(ctx) == 1 {
			return errLockTimeout
		}
		return nil
	})
	if len(begun) != 2 || begun[1].LockTimeout != 2*txretry.DefaultLockTimeout {
		t.Fatalf("attempts began with %+v; want the default, then twice it", begun)
	}
	// ... so 30 s after that, 80 s after the deadlock, it is still armed.
	clk.Advance(30 * time.Second)
	run(func(context.Context) error { return nil })
	if begun[0].LockTimeout != txretry.DefaultLockTimeout {
		t.Errorf("began with %+v; want the default, armed again by the lock timeout", begun)
	}
	// A minute without any, and it is not.
	clk.Advance(time.Minute)
	run(func(context.Context) error { return nil })
	if begun[0].LockTimeout != 0 {
		t.Errorf("began with %+v; want no lock timeout a minute after the last one", begun)
	}
}
