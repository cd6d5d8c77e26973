//go:build unix

package outage

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// The load every outage test runs.
const (
	workers      = 16
	callDeadline = 5 * time.Second
	accounts     = 10
	initial      = 1_000_000
	markerTable  = "txretry_commit_markers"
	// The outage begins once every worker has finished warmCalls calls
	// (its pooled connection is open), and the load goes on until every
	// worker has finished afterCalls calls begun after the server answered
	// again (the pool's dead connections are met and replaced), each wait
	// at most settleLimit.
	warmCalls   = 1
	afterCalls  = 2
	settleLimit = 30 * time.Second
)

// execer runs one statement inside the attempt's transaction.
type execer func(ctx context.Context, query string, args ...any) error

// path is one driver path to the server under test.
type path struct {
	name   string
	engine dbserver.Engine
	// run is RunInTx of the path, with fn reduced to statements.
	run func(ctx context.Context, fn func(ctx context.Context, exec execer) error, opts ...txretry.Option) error
}

// pgxPool returns the pgx native path (pgxpool, pgxretry) to dsn, its pool
// closed when t ends.
func pgxPool(t *testing.T, dsn string) *path {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = workers
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &path{name: "pgxpool", engine: dbserver.Postgres,
		run: func(ctx context.Context, fn func(context.Context, execer) error, opts ...txretry.Option) error {
			return pgxretry.RunInTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
				return fn(ctx, func(ctx context.Context, q string, args ...any) error {
					_, err := tx.Exec(ctx, q, args...)
					return err
				})
			}, opts...)
		}}
}

// sqlDB returns the database/sql path of driver to dsn, its pool closed
// when t ends.
func sqlDB(t *testing.T, name string, e dbserver.Engine, dsn string) *path {
	t.Helper()
	return sqlPath(name, e, openDB(t, e, dsn))
}

// sqlPath returns the database/sql path over db.
func sqlPath(name string, e dbserver.Engine, db *sql.DB) *path {
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	return &path{name: name, engine: e,
		run: func(ctx context.Context, fn func(context.Context, execer) error, opts ...txretry.Option) error {
			return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
				return fn(ctx, func(ctx context.Context, q string, args ...any) error {
					_, err := tx.ExecContext(ctx, q, args...)
					return err
				})
			}, opts...)
		}}
}

// openDB opens dsn with e's database/sql driver, closed when t ends.
func openDB(t *testing.T, e dbserver.Engine, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(e.Driver(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// createSchema creates the accounts, the ledger and the commit-marker
// table through db.
func createSchema(t *testing.T, db *sql.DB, e dbserver.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ddl, err := txretry.CommitMarkerDDL(markerTable)
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{
		"DROP TABLE IF EXISTS accounts", "DROP TABLE IF EXISTS ledger", "DROP TABLE IF EXISTS " + markerTable,
		"CREATE TABLE accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
		// No key on call_id: a call applied twice shows as two rows.
		"CREATE TABLE ledger (call_id BIGINT NOT NULL, from_id INT NOT NULL, to_id INT NOT NULL, amount BIGINT NOT NULL)",
		ddl,
	}
	for id := 1; id <= accounts; id++ {
		stmts = append(stmts, fmt.Sprintf("INSERT INTO accounts VALUES (%d, %d)", id, initial))
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("setup: %v", err)
		}
	}
}

// transfer moves amount from one account to another.
type transfer struct {
	from, to int
	amount   int64
}

// transferTx returns the transaction of call id: the transfer m and its
// ledger row. It updates the lower account first, so transfers wait for
// each other or fail with 40001 but never deadlock: the server finds a
// deadlock only after deadlock_timeout (1 s on PostgreSQL), and chains of
// them under 16 workers on a loaded machine ran first attempts out of
// their 5 s before any outage.
func transferTx(e dbserver.Engine, id int64, m transfer) func(context.Context, execer) error {
	first, second := [2]any{-m.amount, m.from}, [2]any{m.amount, m.to}
	if m.to < m.from {
		first, second = second, first
	}
	return func(ctx context.Context, exec execer) error {
		for _, u := range [][2]any{first, second} {
			if err := exec(ctx, e.Rebind("UPDATE accounts SET balance = balance + ? WHERE id = ?"), u[0], u[1]); err != nil {
				return err
			}
		}
		return exec(ctx, e.Rebind("INSERT INTO ledger (call_id, from_id, to_id, amount) VALUES (?, ?, ?, ?)"),
			id, m.from, m.to, m.amount)
	}
}

// callObserver records one call's attempts.
type callObserver struct {
	mu sync.Mutex
	// started is when the current attempt started.
	started time.Time
	// lost are the attempts that failed with Class ConnectionLost: when
	// each started, and its error's code or type.
	lost []lostAttempt
	// conflicts counts the attempts that failed with Class Retryable.
	conflicts int
	// notCommitted counts the uncertain COMMITs that the verifier found
	// not committed: the call retries them, with or without the option.
	notCommitted int
	attempts     int
	outcome      txretry.Outcome
}

// lostAttempt is an attempt that failed with a connection loss.
type lostAttempt struct {
	started time.Time
	kind    string
}

// Observe implements txretry.Observer.
func (o *callObserver) Observe(_ context.Context, e txretry.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch e.Kind {
	case txretry.AttemptStarted:
		o.started = time.Now()
	case txretry.AttemptFailed:
		switch e.Class {
		case txretry.ConnectionLost:
			kind := e.Code
			if kind == "" {
				kind = e.ErrType
			}
			o.lost = append(o.lost, lostAttempt{started: o.started, kind: kind})
		case txretry.Retryable:
			o.conflicts++
		}
	case txretry.CommitVerified:
		if e.Verification == txretry.VerifiedNotCommitted {
			o.notCommitted++
		}
	case txretry.CallFinished:
		o.attempts, o.outcome = e.Attempts, e.Outcome
	}
}

// result is one call of the load.
type result struct {
	id         int64
	err        error
	start, end time.Time
	obs        *callObserver
}

// window is when the server was away: from the moment the outage began
// to the moment it answered again.
type window struct{ down, up time.Time }

// load runs workers calling transfers through p with opts (and an observer
// of their own) until each has finished warmCalls calls, then outage, then
// until each has finished afterCalls calls begun after the server answered
// again; it returns every call and the outage's window.
func load(t *testing.T, p *path, outage func() window, opts ...txretry.Option) ([]result, window) {
	t.Helper()
	var (
		next    atomic.Int64
		stop    atomic.Bool
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
		// finished counts each worker's finished calls, finishedAfter
		// those begun after up (Unix nanoseconds, 0 until the outage ends).
		finished, finishedAfter [workers]atomic.Int64
		up                      atomic.Int64
	)
	for w := range workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for !stop.Load() {
				id := next.Add(1)
				from := 1 + rnd.IntN(accounts)
				m := transfer{from: from, to: 1 + (from+rnd.IntN(accounts-1))%accounts, amount: 1 + rnd.Int64N(100)}
				obs := &callObserver{}
				ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
				r := result{id: id, start: time.Now(), obs: obs}
				r.err = p.run(ctx, transferTx(p.engine, id, m), append(slices.Clip(opts), txretry.WithObserver(obs))...)
				r.end = time.Now()
				cancel()
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
				finished[w].Add(1)
				if u := up.Load(); u != 0 && r.start.UnixNano() > u {
					finishedAfter[w].Add(1)
				}
			}
		})
	}
	settle(t, "before the outage", &finished, warmCalls)
	win := outage()
	up.Store(win.up.UnixNano())
	settle(t, "after the server answered again", &finishedAfter, afterCalls)
	stop.Store(true)
	wg.Wait()
	t.Logf("%s: outage of %v (from the shutdown to the first answer)", p.name, win.up.Sub(win.down).Round(time.Millisecond))
	return results, win
}

// settle waits until every worker's count is at least n, at most
// settleLimit, and fails t if it is not.
func settle(t *testing.T, when string, counts *[workers]atomic.Int64, n int64) {
	t.Helper()
	for deadline := time.Now().Add(settleLimit); ; time.Sleep(5 * time.Millisecond) {
		lagging := 0
		for i := range counts {
			if counts[i].Load() < n {
				lagging++
			}
		}
		if lagging == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d of %d workers finished fewer than %d calls %s within %v", lagging, workers, n, when, settleLimit)
			return
		}
	}
}

// restart is the outage of a server restart: Stop (fast shutdown), a
// pause of a second, Start on the same port.
func restart(t *testing.T, srv *dbserver.Private) func() window {
	return func() window {
		w := window{down: time.Now()}
		if err := srv.Stop(); err != nil {
			t.Errorf("stop %s: %v", srv, err)
		}
		time.Sleep(time.Second)
		if err := srv.Start(context.Background()); err != nil {
			t.Errorf("start %s: %v", srv, err)
		}
		w.up = time.Now()
		return w
	}
}

// stats are the figures of a load, for the log.
type stats struct {
	calls, failed, inWindow int
	// windowAttempts are the attempts of the calls that overlapped the
	// window; maxAttempts the most of one of them.
	windowAttempts, maxAttempts int
	// lostByKind counts connection-loss attempts by code or error type.
	lostByKind map[string]int
	// lostDuring, lostAfter are connection-loss attempts that started
	// during the window and after the server answered again (those hit a
	// dead pooled connection).
	lostDuring, lostAfter int
	// p99 and p99Window are the 99th percentile call latencies outside and
	// across the window.
	p99, p99Window time.Duration
}

// measure computes the figures of rs around w.
func measure(rs []result, w window) stats {
	s := stats{calls: len(rs), lostByKind: map[string]int{}}
	var lat, latWindow []time.Duration
	for _, r := range rs {
		if r.err != nil {
			s.failed++
		}
		r.obs.mu.Lock()
		for _, l := range r.obs.lost {
			s.lostByKind[l.kind]++
			if l.started.After(w.up) {
				s.lostAfter++
			} else {
				s.lostDuring++
			}
		}
		attempts := r.obs.attempts
		r.obs.mu.Unlock()
		d := r.end.Sub(r.start)
		if r.start.Before(w.up) && r.end.After(w.down) {
			s.inWindow++
			s.windowAttempts += attempts
			s.maxAttempts = max(s.maxAttempts, attempts)
			latWindow = append(latWindow, d)
		} else {
			lat = append(lat, d)
		}
	}
	s.p99, s.p99Window = percentile(lat, 0.99), percentile(latWindow, 0.99)
	return s
}

// percentile returns the q-th quantile of ds, or 0.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

func (s stats) String() string {
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(s.lostByKind)) {
		kinds = append(kinds, fmt.Sprintf("%s×%d", k, s.lostByKind[k]))
	}
	perCall := 0.0
	if s.inWindow > 0 {
		perCall = float64(s.windowAttempts) / float64(s.inWindow)
	}
	return fmt.Sprintf("%d calls, %d failed; %d calls crossed the outage: %.2f attempts per call (max %d), p99 %v (%v outside it); "+
		"connection-loss attempts %d during the outage, %d after the server was back (dead pooled connections); by kind: %s",
		s.calls, s.failed, s.inWindow, perCall, s.maxAttempts, s.p99Window.Round(time.Millisecond), s.p99.Round(time.Millisecond),
		s.lostDuring, s.lostAfter, strings.Join(kinds, " "))
}
