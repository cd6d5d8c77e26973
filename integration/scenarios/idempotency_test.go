package scenarios

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// idemSetup creates the key table and a ledger without a unique index, so
// that a request applied twice shows as two rows.
func idemSetup(t *testing.T, ctx context.Context, p *driverPath) {
	t.Helper()
	ddl, err := txretry.IdempotencyKeysDDL("idem_keys")
	if err != nil {
		t.Fatal(err)
	}
	p.setup(t, ctx, ddl, "CREATE TABLE idem_ledger (k VARCHAR(64) NOT NULL, n INT NOT NULL)")
}

// applyOnce is fn of a request for key: one ledger row, numbered by run.
// The ledger holds the key's token, since MySQL's default collation would
// count keys that differ only in case as one.
func applyOnce(key string, runs *atomic.Int32, hold time.Duration) txFunc {
	return func(ctx context.Context, q querier) error {
		n := runs.Add(1)
		if err := q.exec(ctx, "INSERT INTO idem_ledger (k, n) VALUES ($1, $2)", txretry.IdempotencyKeyToken(key), n); err != nil {
			return err
		}
		if hold > 0 {
			// Keep the key's row locked, so that concurrent calls queue on it.
			select {
			case <-time.After(hold):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
}

var idemIsolations = []sql.IsolationLevel{sql.LevelDefault, sql.LevelSerializable}

// TestIdempotencyKeySequential: a key runs fn once; every later call with
// it gets ErrAlreadyCommitted without running fn; a call that rolled back
// leaves the key free; long, upper-case and odd keys are stored hashed; and
// the errors never show the key, though MySQL's duplicate-key message
// quotes it.
func TestIdempotencyKeySequential(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		idemSetup(t, ctx, p)
		keys := []string{"order-1", "Order-1", strings.Repeat("x", 200), "naïve key 'quoted'", "ORDER-1"}
		for _, iso := range idemIsolations {
			for _, k := range keys {
				key := fmt.Sprintf("%s/%d", k, iso)
				if k == "order-1" {
					key = fmt.Sprintf("order-1.%d", iso) // stays plain
				}
				var runs atomic.Int32
				opt := txretry.WithIdempotencyKey("idem_keys", key)
				if err := p.run(ctx, applyOnce(key, &runs, 0), opt, txretry.WithIsolation(iso)); err != nil {
					t.Fatalf("%v: first call: %v", iso, err)
				}
				for range 2 {
					err := p.run(ctx, applyOnce(key, &runs, 0), opt, txretry.WithIsolation(iso))
					if err != txretry.ErrAlreadyCommitted { //nolint:errorlint // exactly the sentinel: nothing wrapped that could show the key
						t.Fatalf("%v: repeated call: err = %v, want ErrAlreadyCommitted", iso, err)
					}
				}
				if runs.Load() != 1 {
					t.Fatalf("%v: fn ran %d times, want once", iso, runs.Load())
				}
				if n := p.count(t, ctx, "SELECT COUNT(*) FROM idem_ledger WHERE k = $1", txretry.IdempotencyKeyToken(key)); n != 1 {
					t.Fatalf("%v: %d ledger rows, want 1", iso, n)
				}
				if n := p.count(t, ctx, "SELECT COUNT(*) FROM idem_keys WHERE token = $1", txretry.IdempotencyKeyToken(key)); n != 1 {
					t.Fatalf("%v: the key's token is not in the table", iso)
				}
			}
		}
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM idem_keys WHERE token LIKE '~%'"); n != 2*(len(keys)-1) {
			t.Errorf("%d hashed tokens, want %d", n, 2*(len(keys)-1))
		}

		// fn fails: the key is rolled back with it, and the next call runs.
		boom := errors.New("boom")
		var runs atomic.Int32
		opt := txretry.WithIdempotencyKey("idem_keys", "failing")
		if err := p.run(ctx, func(ctx context.Context, q querier) error {
			if err := applyOnce("failing", &runs, 0)(ctx, q); err != nil {
				return err
			}
			return boom
		}, opt); !errors.Is(err, boom) {
			t.Fatalf("failing call: %v", err)
		}
		if err := p.run(ctx, applyOnce("failing", &runs, 0), opt); err != nil {
			t.Fatalf("call after a rollback: %v", err)
		}
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM idem_ledger WHERE k = 'failing'"); n != 1 || runs.Load() != 2 {
			t.Fatalf("%d ledger rows after %d runs, want 1 after 2", n, runs.Load())
		}
	})
}

// TestIdempotencyKeyConcurrent: calls with one key at once, without a
// contention manager so that they really meet in the database: exactly one
// commits fn, the others wait on the key and get ErrAlreadyCommitted; when
// the first run of fn fails, its call returns the failure and one of the
// waiting calls runs fn instead. The retried codes are logged: MariaDB
// reports 1213 among the waiting inserts when the first call rolls back;
// PostgreSQL answers 23505 even under SERIALIZABLE, since the key's insert
// comes before any read (a 40001 there would be retried and then find the
// key, which the unit tests check on the fake driver).
func TestIdempotencyKeyConcurrent(t *testing.T) {
	const callers, rounds = 6, 4
	boom := errors.New("boom")
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		idemSetup(t, ctx, p)
		for _, iso := range idemIsolations {
			codes := &retriedCodes{}
			defer func() { t.Logf("%v: retried attempts by code: %v", iso, codes.counts()) }()
			for r := range rounds {
				failFirst := r%2 == 1
				key := fmt.Sprintf("c-%d-%d", iso, r)
				var runs atomic.Int32
				errs := make([]error, callers)
				var wg sync.WaitGroup
				for i := range callers {
					wg.Go(func() {
						errs[i] = p.run(ctx, func(ctx context.Context, q querier) error {
							if err := applyOnce(key, &runs, 100*time.Millisecond)(ctx, q); err != nil {
								return err
							}
							if failFirst && runs.Load() == 1 {
								return boom
							}
							return nil
						}, txretry.WithIdempotencyKey("idem_keys", key), txretry.WithIsolation(iso),
							txretry.WithoutContentionManager(), txretry.WithObserver(codes))
					})
				}
				wg.Wait()
				var ok, already, failed int
				for _, err := range errs {
					switch {
					case err == nil:
						ok++
					case errors.Is(err, txretry.ErrAlreadyCommitted):
						already++
					case errors.Is(err, boom):
						failed++
					default:
						t.Fatalf("%v round %d: unexpected error %v", iso, r, err)
					}
				}
				wantFailed := 0
				if failFirst {
					wantFailed = 1
				}
				if ok != 1 || failed != wantFailed || already != callers-1-wantFailed {
					t.Fatalf("%v round %d: %d committed, %d already committed, %d failed", iso, r, ok, already, failed)
				}
				if n := p.count(t, ctx, "SELECT COUNT(*) FROM idem_ledger WHERE k = $1", txretry.IdempotencyKeyToken(key)); n != 1 {
					t.Fatalf("%v round %d: %d ledger rows, want 1", iso, r, n)
				}
			}
		}
	})
}

// TestIdempotencyKeyTable: the purge statement forgets old keys, whose
// requests then run again, and keeps recent ones; a bad table name is
// rejected before any attempt, and a missing table fails the call with the
// server's error, not ErrAlreadyCommitted.
func TestIdempotencyKeyTable(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		idemSetup(t, ctx, p)
		p.setup(t, ctx,
			"INSERT INTO idem_keys (token, created_at) VALUES ('old', '2000-01-01 00:00:00')",
			"INSERT INTO idem_keys (token) VALUES ('recent')")
		purge, err := txretry.PurgeIdempotencyKeysSQL("idem_keys", 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		p.setup(t, ctx, purge)
		var runs atomic.Int32
		if err := p.run(ctx, applyOnce("old", &runs, 0), txretry.WithIdempotencyKey("idem_keys", "old")); err != nil {
			t.Errorf("a purged key: %v, want its request to run again", err)
		}
		if err := p.run(ctx, applyOnce("recent", &runs, 0), txretry.WithIdempotencyKey("idem_keys", "recent")); !errors.Is(err, txretry.ErrAlreadyCommitted) {
			t.Errorf("a recent key after the purge: %v, want ErrAlreadyCommitted", err)
		}
		for _, bad := range []string{"idem_keys; DROP TABLE idem_ledger", "idem keys", "`idem_keys`", `"idem_keys"`, ""} {
			if err := p.run(ctx, applyOnce("x", &runs, 0), txretry.WithIdempotencyKey(bad, "x")); !errors.Is(err, txretry.ErrInvalidOption) {
				t.Errorf("table %q: %v, want ErrInvalidOption", bad, err)
			}
		}
		err = p.run(ctx, applyOnce("y", &runs, 0), txretry.WithIdempotencyKey("no_such_table", "y"))
		if err == nil || errors.Is(err, txretry.ErrAlreadyCommitted) || errors.Is(err, txretry.ErrInvalidOption) {
			t.Errorf("missing table: %v, want the server's error", err)
		}
		if runs.Load() != 1 {
			t.Errorf("fn ran %d times, want once (the purged key)", runs.Load())
		}
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM idem_ledger"); n != 1 {
			t.Errorf("%d ledger rows, want 1", n)
		}
	})
}

// retriedCodes counts the codes of the attempts that failed and were retried.
type retriedCodes struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *retriedCodes) Observe(_ context.Context, e txretry.Event) {
	if e.Kind == txretry.AttemptFailed && e.Class == txretry.Retryable {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.n == nil {
			r.n = map[string]int{}
		}
		r.n[e.Code]++
	}
}

func (r *retriedCodes) counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.n)
}
