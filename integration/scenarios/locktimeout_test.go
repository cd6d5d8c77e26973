package scenarios

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// serializable is the isolation level at which WithLockTimeout applies
// (REPEATABLE READ too).
var serializable = txretry.WithIsolation(sql.LevelSerializable)

// lockTimeoutOpts are the options that bound party's lock waits to d on
// path p: pgxretry does so by default with 50 ms, RunInTx over
// database/sql only when asked.
func lockTimeoutOpts(p *driverPath, d time.Duration) []txretry.Option {
	if p.name == "pgx-native" && d == txretry.DefaultLockTimeout {
		return nil // the default under test
	}
	return []txretry.Option{txretry.WithLockTimeout(d)}
}

// TestLockTimeoutEndsADeadlockEarly: PostgreSQL looks for a deadlock only
// after deadlock_timeout (1 s by default, set so here for the transaction),
// and until then both transactions hold their rows, past a caller's
// deadline of a second. With WithLockTimeout (pgxretry's default), the
// party whose lock wait runs out first fails with 55P03 instead, is
// retried, and both calls commit once each. (Party 1 waits longer than
// party 0, so that party 0 is the only victim: with equal timeouts both
// may run out together, and both be retried, which is fine in use but not
// in this harness, where a retry waits for the other call.)
func TestLockTimeoutEndsADeadlockEarly(t *testing.T) {
	forEachPath(t, postgresPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, crossLockDDL...)
		c := newCrossLock(false)
		var ev events
		errs := c.pair.run(func(i int) error {
			fn := c.fn(p.d, i)
			opts := append(lockTimeoutOpts(p, []time.Duration{txretry.DefaultLockTimeout, 500 * time.Millisecond}[i]),
				serializable, ev.option())
			return p.run(ctx, func(ctx context.Context, q querier) error {
				if err := q.exec(ctx, "SET LOCAL deadlock_timeout = '1s'"); err != nil {
					return err
				}
				return fn(ctx, q)
			}, opts...)
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("RunInTx: %v", err)
		}
		failed := ev.of(txretry.AttemptFailed)
		if len(failed) != 1 || failed[0].Code != "55P03" || failed[0].Class != txretry.Retryable || failed[0].Attempt != 1 {
			t.Errorf("failed attempts = %+v; want one retryable 55P03 (lock_timeout), not a deadlock found after deadlock_timeout", failed)
		}
		if v, w := c.runs[0].Load(), c.runs[1].Load(); v != 2 || w != 1 {
			t.Errorf("fn runs: %d and %d; want 2 (party 0, the victim) and 1", v, w)
		}
		c.checkApplied(t, ctx, p)
	})
}

// TestLockTimeoutArmedAfterADeadlock: RunInTx over database/sql sets no
// lock timeout by default, until its pool's contention manager sees a lock
// wait worth ending: here a deadlock that PostgreSQL found after its 1 s
// deadlock_timeout. From then on the pool's SERIALIZABLE calls get
// DefaultLockTimeout, the deadlock's victim's retry included.
func TestLockTimeoutArmedAfterADeadlock(t *testing.T) {
	forEachPath(t, []pathKind{pgxStdlib, pqPath}, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, crossLockDDL...)
		setting := func(opts ...txretry.Option) string {
			var s string
			if err := p.run(ctx, func(ctx context.Context, q querier) error {
				return q.queryRow(ctx, "SELECT current_setting('lock_timeout')").Scan(&s)
			}, opts...); err != nil {
				t.Fatalf("RunInTx: %v", err)
			}
			return s
		}
		if s := setting(serializable); s != "0" {
			t.Fatalf("lock_timeout before any deadlock = %q, want 0", s)
		}
		c := newCrossLock(false)
		var ev events
		errs := c.pair.run(func(i int) error {
			fn := c.fn(p.d, i)
			return p.run(ctx, func(ctx context.Context, q querier) error {
				if err := q.exec(ctx, "SET LOCAL deadlock_timeout = '1s'"); err != nil {
					return err
				}
				return fn(ctx, q)
			}, serializable, ev.option())
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("RunInTx: %v", err)
		}
		failed := ev.of(txretry.AttemptFailed)
		if len(failed) != 1 || failed[0].Code != "40P01" || failed[0].Duration < time.Second {
			t.Fatalf("failed attempts = %+v; want one deadlock found after deadlock_timeout", failed)
		}
		c.checkApplied(t, ctx, p)
		if s := setting(serializable); s != "50ms" {
			t.Errorf("lock_timeout after the deadlock = %q, want 50ms (armed)", s)
		}
		if s := setting(txretry.WithIsolation(sql.LevelReadCommitted)); s != "0" {
			t.Errorf("lock_timeout at READ COMMITTED = %q, want 0", s)
		}
		if s := setting(serializable, txretry.WithLockTimeout(0)); s != "0" {
			t.Errorf("lock_timeout with WithLockTimeout(0) = %q, want 0", s)
		}
	})
}

// TestLockTimeoutSetting reads lock_timeout inside each attempt: set where
// WithLockTimeout applies (pgxretry by default, database/sql when asked;
// SERIALIZABLE and REPEATABLE READ only; on database/sql also once armed,
// which a failed attempt of 50 ms or more does) and left alone elsewhere.
// Attempts 1 and 3 fail with a serialization failure, attempt 2 (where a lock
// timeout is set) waits for a lock that another transaction holds, until
// the timeout runs out, which doubles the timeout of attempts 3 and 4. On
// MySQL and MariaDB the option is accepted and does nothing.
func TestLockTimeoutSetting(t *testing.T) {
	tests := []struct {
		name  string
		kinds []pathKind
		opts  []txretry.Option
		want  map[string][]string // per path: lock_timeout in attempts 1-4
	}{
		{"serializable", postgresPaths, []txretry.Option{serializable},
			map[string][]string{"pgx-native": {"50ms", "50ms", "100ms", "100ms"}, "pgx-stdlib": {"0", "0", "0", "0"}, "pq": {"0", "0", "0", "0"}}},
		{"repeatable read, explicit", postgresPaths, []txretry.Option{txretry.WithIsolation(sql.LevelRepeatableRead), txretry.WithLockTimeout(20 * time.Millisecond)},
			map[string][]string{"pgx-native": {"20ms", "20ms", "40ms", "40ms"}, "pgx-stdlib": {"20ms", "20ms", "40ms", "40ms"}, "pq": {"20ms", "20ms", "40ms", "40ms"}}},
		{"rounded up to milliseconds", postgresPaths, []txretry.Option{serializable, txretry.WithLockTimeout(1500 * time.Microsecond)},
			map[string][]string{"pgx-native": {"2ms", "2ms", "3ms", "3ms"}, "pgx-stdlib": {"2ms", "2ms", "3ms", "3ms"}, "pq": {"2ms", "2ms", "3ms", "3ms"}}},
		{"read committed", postgresPaths, []txretry.Option{txretry.WithIsolation(sql.LevelReadCommitted), txretry.WithLockTimeout(20 * time.Millisecond)},
			map[string][]string{"pgx-native": {"0", "0", "0", "0"}, "pgx-stdlib": {"0", "0", "0", "0"}, "pq": {"0", "0", "0", "0"}}},
		{"turned off", postgresPaths, []txretry.Option{serializable, txretry.WithLockTimeout(0)},
			map[string][]string{"pgx-native": {"0", "0", "0", "0"}, "pgx-stdlib": {"0", "0", "0", "0"}, "pq": {"0", "0", "0", "0"}}},
		{"mysql ignores it", []pathKind{mysqlPath}, []txretry.Option{serializable, txretry.WithLockTimeout(20 * time.Millisecond)},
			map[string][]string{"mysql": nil}}, // the session's innodb_lock_wait_timeout, unchanged
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachPath(t, tt.kinds, func(t *testing.T, p *driverPath) {
				ctx := testContext(t)
				testCtx := ctx // not fn's: the holder must not join the attempt
				query := "SELECT current_setting('lock_timeout')"
				want := tt.want[p.name]
				if p.name == "mysql" {
					query = "SELECT CAST(@@innodb_lock_wait_timeout AS CHAR)"
					var s string
					if err := p.db.queryRow(ctx, query).Scan(&s); err != nil {
						t.Fatal(err)
					}
					want = []string{s, s, s, s}
				}
				var got []string
				var ev events
				err := p.run(ctx, func(ctx context.Context, q querier) error {
					var s string
					if err := q.queryRow(ctx, query).Scan(&s); err != nil {
						return err
					}
					got = append(got, s)
					switch len(got) {
					case 1, 3:
						return q.exec(ctx, p.d.raiseRetryable)
					case 2:
						if s == "0" || p.name == "mysql" {
							return q.exec(ctx, p.d.raiseRetryable)
						}
						return lockTimeout(t, testCtx, ctx, p, q)
					}
					return nil
				}, append(slices.Clone(tt.opts), ev.option())...)
				if err != nil {
					t.Fatalf("RunInTx: %v", err)
				}
				if slow := slowFailures(ev.of(txretry.AttemptFailed)); p.name != "pgx-native" && tt.name == "serializable" && slow > 0 {
					// A failed attempt of 50 ms or more (a stalled machine)
					// rightly arms database/sql's default, so the rest of
					// the sequence differs; only the first attempt is known.
					t.Logf("%d failed attempts lasted %v or more: the default was armed; checking attempt 1 only", slow, txretry.DefaultLockTimeout)
					want, got = want[:1], got[:1]
				}
				if !slices.Equal(got, want) {
					t.Errorf("lock timeouts in attempts 1-4 = %q, want %q", got, want)
				}
			})
		})
	}
}

// slowFailures counts the failed attempts that lasted DefaultLockTimeout
// or more, which arm database/sql's default lock timeout.
func slowFailures(failed []txretry.Event) int {
	n := 0
	for _, e := range failed {
		if e.Duration >= txretry.DefaultLockTimeout {
			n++
		}
	}
	return n
}

// TestLockTimeoutLeavesNowaitAlone: NOWAIT raises the same 55P03 as a lock
// timeout, but means "fail if the lock is not free", so it is returned at
// once, not retried.
func TestLockTimeoutLeavesNowaitAlone(t *testing.T) {
	forEachPath(t, postgresPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, crossLockDDL...)
		release := holdLock(t, ctx, p, "SELECT id FROM accounts WHERE id = 1 FOR UPDATE")
		defer release()
		var ev events
		opts := append(lockTimeoutOpts(p, txretry.DefaultLockTimeout), serializable, ev.option())
		err := p.run(ctx, func(ctx context.Context, q querier) error {
			return q.exec(ctx, "SELECT id FROM accounts WHERE id = 1 FOR UPDATE NOWAIT")
		}, opts...)
		if p.d.codeOf(err) != "55P03" {
			t.Fatalf("RunInTx = %v; want NOWAIT's 55P03", err)
		}
		if n := len(ev.of(txretry.AttemptStarted)); n != 1 {
			t.Errorf("%d attempts; want 1 (NOWAIT is not retried)", n)
		}
	})
}

// TestLockTimeoutOfFnReplacesTheAttempts: a lock_timeout that fn sets
// itself replaces the attempt's, and its timeouts are retried like the
// attempt's own while the option is on; with WithLockTimeout(0) fn gets
// its 55P03 back.
func TestLockTimeoutOfFnReplacesTheAttempts(t *testing.T) {
	forEachPath(t, postgresPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		release := holdLock(t, ctx, p, "SELECT pg_advisory_xact_lock(4244)")
		fn := func(ctx context.Context, q querier) error {
			if err := q.exec(ctx, "SET LOCAL lock_timeout = 20"); err != nil {
				return err
			}
			return q.exec(ctx, "SELECT pg_advisory_xact_lock(4244)")
		}
		err := p.run(ctx, fn, serializable, txretry.WithLockTimeout(0))
		if p.d.codeOf(err) != "55P03" {
			release()
			t.Fatalf("with WithLockTimeout(0): RunInTx = %v; want fn's 55P03", err)
		}
		// The lock is released once an attempt has failed on fn's timeout:
		// the call then commits, having retried it.
		var failed []txretry.Event
		released := false
		observe := txretry.WithObserver(txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
			if e.Kind == txretry.AttemptFailed {
				failed = append(failed, e)
				if !released {
					released = true
					release()
				}
			}
		}))
		err = p.run(ctx, fn, serializable, txretry.WithLockTimeout(txretry.DefaultLockTimeout), observe)
		if !released {
			release()
		}
		if err != nil {
			t.Fatalf("with WithLockTimeout: RunInTx = %v", err)
		}
		if len(failed) != 1 || failed[0].Code != "55P03" || failed[0].Class != txretry.Retryable {
			t.Errorf("failed attempts = %+v; want fn's lock timeout, retried once", failed)
		}
	})
}

// TestLockTimeoutWaitsLongerEachAttempt: a lock held for long is still
// taken, because each attempt that the lock timeout ended waits twice as
// long as the one before (50, 100, 200 ms by default). The holder lets go
// after the third lock timeout; each failed attempt lasted at least its
// timeout.
func TestLockTimeoutWaitsLongerEachAttempt(t *testing.T) {
	forEachPath(t, postgresPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		release := holdLock(t, ctx, p, "SELECT pg_advisory_xact_lock(4242)")
		var failed []txretry.Event
		observe := txretry.WithObserver(txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
			if e.Kind == txretry.AttemptFailed {
				if failed = append(failed, e); len(failed) == 3 {
					release()
				}
			}
		}))
		opts := append(lockTimeoutOpts(p, txretry.DefaultLockTimeout), serializable, observe)
		err := p.run(ctx, func(ctx context.Context, q querier) error {
			return q.exec(ctx, "SELECT pg_advisory_xact_lock(4242)")
		}, opts...)
		if len(failed) < 3 {
			release()
		}
		if err != nil {
			t.Fatalf("RunInTx: %v", err)
		}
		if len(failed) != 3 {
			t.Fatalf("failed attempts = %+v; want 3 lock timeouts", failed)
		}
		for i, e := range failed {
			if least := txretry.DefaultLockTimeout << i; e.Code != "55P03" || e.Class != txretry.Retryable || e.Duration < least {
				t.Errorf("failed attempt %d: %+v; want a retryable 55P03 after at least %v", i+1, e, least)
			}
		}
	})
}

// lockTimeout makes the attempt's lock timeout run out: another
// transaction (begun with testCtx, so as not to join the attempt) holds an
// advisory lock that the attempt then waits for.
func lockTimeout(t *testing.T, testCtx, ctx context.Context, p *driverPath, q querier) error {
	release := holdLock(t, testCtx, p, "SELECT pg_advisory_xact_lock(4243)")
	defer release()
	return q.exec(ctx, "SELECT pg_advisory_xact_lock(4243)")
}

// holdLock takes a lock with query in a transaction of its own on p, and
// holds it until release is called (once).
func holdLock(t *testing.T, ctx context.Context, p *driverPath, query string) (release func()) {
	t.Helper()
	taken, done, stop := make(chan error, 1), make(chan error, 1), make(chan struct{})
	go func() {
		done <- p.run(ctx, func(ctx context.Context, q querier) error {
			err := q.exec(ctx, query)
			taken <- err
			if err != nil {
				return err
			}
			select {
			case <-stop:
			case <-ctx.Done():
			}
			return nil
		}, txretry.WithMaxAttempts(1))
	}()
	if err := <-taken; err != nil {
		t.Fatalf("hold %q: %v", query, err)
	}
	return func() {
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("holder: %v", err)
		}
	}
}
