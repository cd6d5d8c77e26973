package scenarios

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// Tests of WithDatabaseKeyLocks on the real servers: several pools on one
// database stand for the replicas of a service, each with its own txretry
// state (contention manager), so only the database's locks can keep them
// apart.

// keyLockKind is a driver path that can be opened several times on one
// database, and through a fault proxy.
type keyLockKind struct {
	name      string
	fresh     func(t testing.TB) string                  // a fresh database's DSN
	on        func(t *testing.T, dsn string) *driverPath // a path on dsn
	sqlDriver string                                     // database/sql driver name, for the observer's sessions
	proto     faultproxy.Protocol
	// via returns dsn through addr.
	via func(t *testing.T, dsn, addr string) string
	// upstream returns dsn's host:port.
	upstream func(t *testing.T, dsn string) string
}

var (
	pgURL = func(t *testing.T, dsn string) *url.URL {
		u, err := url.Parse(dsn)
		if err != nil || u.Host == "" {
			t.Skipf("TXRETRY_PG_DSN is not a URL: %v", err)
		}
		return u
	}
	pgVia = func(t *testing.T, dsn, addr string) string {
		u := pgURL(t, dsn)
		u.Host = addr
		return u.String()
	}
	pgUpstream = func(t *testing.T, dsn string) string { return pgURL(t, dsn).Host }

	keyLockKinds = []keyLockKind{
		{name: "pgx-native", fresh: dbservertest.Postgres, on: pgxNativeOn, sqlDriver: "pgx", proto: faultproxy.Postgres, via: pgVia, upstream: pgUpstream},
		{name: "pgx-stdlib", fresh: dbservertest.Postgres, on: pgxStdlibOn, sqlDriver: "pgx", proto: faultproxy.Postgres, via: pgVia, upstream: pgUpstream},
		{name: "mysql", fresh: dbservertest.MySQL, on: mysqlOn, sqlDriver: "mysql", proto: faultproxy.MySQL,
			via: func(t *testing.T, dsn, addr string) string {
				cfg, err := mysql.ParseDSN(dsn)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Addr = addr
				return cfg.FormatDSN()
			},
			upstream: func(t *testing.T, dsn string) string {
				cfg, err := mysql.ParseDSN(dsn)
				if err != nil {
					t.Fatal(err)
				}
				return cfg.Addr
			}},
	}
)

// lockWatch looks at the database's key locks from sessions of its own.
type lockWatch struct {
	db  *sql.DB
	pg  bool
	dsn string
}

func newLockWatch(t *testing.T, k keyLockKind, dsn string) *lockWatch {
	db, err := sql.Open(k.sqlDriver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &lockWatch{db: db, pg: k.sqlDriver == "pgx", dsn: dsn}
}

// lockID and lockName are the documented mapping of a key, computed here
// independently of the library.
func lockID(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte("txretry:" + key))
	return int64(h.Sum64())
}

func lockName(key string) string { return fmt.Sprintf("txretry:%016x", uint64(lockID(key))) }

// held returns how many of keys' locks some session holds.
func (w *lockWatch) held(ctx context.Context, keys ...string) (int, error) {
	n := 0
	for _, k := range keys {
		var used bool
		var err error
		if w.pg {
			id := uint64(lockID(k))
			err = w.db.QueryRowContext(ctx, `SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND granted
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND classid = $1 AND objid = $2 AND objsubid = 1`, int64(id>>32), int64(id&0xffffffff)).Scan(&used)
		} else {
			err = w.db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) IS NOT NULL", lockName(k)).Scan(&used)
		}
		if err != nil {
			return 0, err
		}
		if used {
			n++
		}
	}
	return n, nil
}

// requireHeld fails t unless want of keys' locks are held within a few
// seconds (a server notices a closed session's end a little later).
func (w *lockWatch) requireHeld(t *testing.T, ctx context.Context, want int, keys ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := w.held(ctx, keys...)
		if err != nil {
			t.Fatalf("look at the locks: %v", err)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d key lock(s) held, want %d", n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hold takes key's lock in a session of the watch's own until the returned
// function is called.
func (w *lockWatch) hold(t *testing.T, ctx context.Context, key string) (release func()) {
	t.Helper()
	conn, err := w.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	q, arg, free := "SELECT GET_LOCK(?, 10) = 1", any(lockName(key)), "SELECT RELEASE_LOCK(?) = 1"
	if w.pg {
		q, arg, free = "SELECT true FROM pg_advisory_lock($1)", lockID(key), "SELECT pg_advisory_unlock($1)"
	}
	var ok bool
	if err := conn.QueryRowContext(ctx, q, arg).Scan(&ok); err != nil || !ok {
		t.Fatalf("take the lock: %v %v", ok, err)
	}
	return func() {
		if err := conn.QueryRowContext(ctx, free, arg).Scan(&ok); err != nil || !ok {
			t.Errorf("release the lock: %v %v", ok, err)
		}
		conn.Close()
	}
}

// replicaPaths opens n paths of kind k on one fresh database, standing for
// n replicas, and returns the database's DSN.
func replicaPaths(t *testing.T, k keyLockKind, n int) (string, []*driverPath) {
	dsn := k.fresh(t)
	paths := make([]*driverPath, n)
	for i := range paths {
		paths[i] = k.on(t, dsn)
	}
	return dsn, paths
}

// forEachKeyLockKind runs body for each kind, then checks for leaked
// goroutines.
func forEachKeyLockKind(t *testing.T, body func(t *testing.T, k keyLockKind)) {
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, knownBackground...)
	for _, k := range keyLockKinds {
		t.Run(k.name, func(t *testing.T) { body(t, k) })
	}
	goleak.VerifyNone(t, opts...)
}

// failures counts retryable failed attempts, by code.
type failures struct {
	mu    sync.Mutex
	codes map[string]int
	n     atomic.Int64
}

func (f *failures) option() txretry.Option {
	return txretry.WithObserver(txretry.ObserverFunc(func(_ context.Context, ev txretry.Event) {
		if ev.Kind == txretry.AttemptFailed && ev.Class == txretry.Retryable {
			f.n.Add(1)
			f.mu.Lock()
			if f.codes == nil {
				f.codes = map[string]int{}
			}
			f.codes[ev.Code]++
			f.mu.Unlock()
		}
	}))
}

// Replicas that name the rows they touch as keys take turns on them: every
// call commits, SERIALIZABLE never fails an attempt over a keyed row, and
// the balances add up.
func TestKeyLocksReplicasTakeTurns(t *testing.T) {
	const replicas, workers, calls, accounts = 4, 4, 15, 4
	forEachKeyLockKind(t, func(t *testing.T, k keyLockKind) {
		dsn, paths := replicaPaths(t, k, replicas)
		ctx := testContext(t)
		paths[0].setup(t, ctx,
			"CREATE TABLE kl_hot (id INT PRIMARY KEY, n BIGINT NOT NULL)",
			"INSERT INTO kl_hot VALUES (1, 0)",
			"CREATE TABLE kl_accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)")
		for a := 1; a <= accounts; a++ {
			paths[0].setup(t, ctx, fmt.Sprintf("INSERT INTO kl_accounts VALUES (%d, 1000)", a))
		}
		w := newLockWatch(t, k, dsn)
		var fails failures
		var failed atomic.Int64
		hot := func(ctx context.Context, q querier) error {
			var n int64
			if err := q.queryRow(ctx, "SELECT n FROM kl_hot WHERE id = 1").Scan(&n); err != nil {
				return err
			}
			return q.exec(ctx, "UPDATE kl_hot SET n = $1 WHERE id = 1", n+1)
		}
		transfer := func(from, to int) txFunc {
			return func(ctx context.Context, q querier) error {
				var a, b int64
				if err := q.queryRow(ctx, "SELECT balance FROM kl_accounts WHERE id = $1", from).Scan(&a); err != nil {
					return err
				}
				if err := q.queryRow(ctx, "SELECT balance FROM kl_accounts WHERE id = $1", to).Scan(&b); err != nil {
					return err
				}
				if err := q.exec(ctx, "UPDATE kl_accounts SET balance = $1 WHERE id = $2", a-1, from); err != nil {
					return err
				}
				return q.exec(ctx, "UPDATE kl_accounts SET balance = $1 WHERE id = $2", b+1, to)
			}
		}
		var wg sync.WaitGroup
		for r, p := range paths {
			for wk := range workers {
				wg.Go(func() {
					for c := range calls {
						cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						opts := []txretry.Option{txretry.WithIsolation(sql.LevelSerializable), txretry.WithDatabaseKeyLocks(), fails.option()}
						err := p.run(cctx, hot, append(opts, txretry.WithContentionKeys("kl-hot"))...)
						if err == nil {
							from, to := 1+(r+wk+c)%accounts, 1+(r+2*wk+c+1)%accounts
							if from == to {
								to = 1 + to%accounts
							}
							err = p.run(cctx, transfer(from, to), append(opts,
								txretry.WithContentionKeys(fmt.Sprint("kl-account:", from), fmt.Sprint("kl-account:", to)))...)
						}
						cancel()
						if err != nil {
							failed.Add(1)
							t.Errorf("call failed: %v", err)
						}
					}
				})
			}
		}
		wg.Wait()
		if n := paths[0].count(t, ctx, "SELECT n FROM kl_hot WHERE id = 1"); n != replicas*workers*calls-int(failed.Load()) {
			t.Errorf("hot row counted %d increments", n)
		}
		if sum := paths[0].count(t, ctx, "SELECT SUM(balance) FROM kl_accounts"); sum != 1000*accounts {
			t.Errorf("balances add up to %d, want %d", sum, 1000*accounts)
		}
		if fails.n.Load() != 0 {
			t.Errorf("retryable failures despite the locks: %v", fails.codes)
		}
		keys := []string{"kl-hot"}
		for a := 1; a <= accounts; a++ {
			keys = append(keys, fmt.Sprint("kl-account:", a))
		}
		w.requireHeld(t, ctx, 0, keys...)
		t.Logf("%d replicas x %d workers x %d calls, %d retryable failures", replicas, workers, calls, fails.n.Load())
	})
}

// The locks are released on every path out of an attempt, and the pools
// get all their connections back.
func TestKeyLocksReleasedOnEveryPath(t *testing.T) {
	forEachKeyLockKind(t, func(t *testing.T, k keyLockKind) {
		dsn := k.fresh(t)
		p := k.on(t, dsn)
		ctx := testContext(t)
		p.setup(t, ctx, "CREATE TABLE kl_t (id INT PRIMARY KEY, n BIGINT NOT NULL)", "INSERT INTO kl_t VALUES (1, 0)")
		w := newLockWatch(t, k, dsn)
		keys := []string{"kl-a", "kl-b"}
		opts := []txretry.Option{txretry.WithContentionKeys(keys...), txretry.WithDatabaseKeyLocks()}
		bump := func(ctx context.Context, q querier) error {
			return q.exec(ctx, "UPDATE kl_t SET n = n + 1 WHERE id = 1")
		}
		errFn := errors.New("fn failed")
		check := func(t *testing.T) {
			t.Helper()
			w.requireHeld(t, ctx, 0, keys...)
			requireIdle(t, p)
		}

		t.Run("fn error", func(t *testing.T) {
			err := p.run(ctx, func(ctx context.Context, q querier) error {
				if n, _ := w.held(ctx, keys...); n != len(keys) {
					t.Errorf("fn runs with %d of %d locks held", n, len(keys))
				}
				return errFn
			}, opts...)
			if !errors.Is(err, errFn) {
				t.Fatalf("err = %v", err)
			}
			check(t)
		})
		if k.sqlDriver == "pgx" { // MySQL and MariaDB go on after a failed statement
			t.Run("COMMIT answered with ROLLBACK", func(t *testing.T) {
				before := p.count(t, ctx, "SELECT n FROM kl_t WHERE id = 1")
				err := p.run(ctx, func(ctx context.Context, q querier) error {
					if err := bump(ctx, q); err != nil {
						return err
					}
					_ = q.exec(ctx, "SELECT 1/0") // swallowed: the transaction is aborted
					return nil
				}, opts...)
				if err == nil {
					t.Fatal("err = nil, want the failure of a COMMIT that rolled back")
				}
				if after := p.count(t, ctx, "SELECT n FROM kl_t WHERE id = 1"); after != before {
					t.Errorf("n went from %d to %d", before, after)
				}
				check(t)
			})
		}
		t.Run("fn panic", func(t *testing.T) {
			func() {
				defer func() {
					if recover() == nil {
						t.Error("no panic")
					}
				}()
				_ = p.run(ctx, func(ctx context.Context, q querier) error {
					if err := bump(ctx, q); err != nil {
						return err
					}
					panic("fn panicked")
				}, opts...)
			}()
			check(t)
		})
		t.Run("cancelled in fn", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			err := p.run(cctx, func(ctx context.Context, q querier) error {
				cancel()
				return bump(ctx, q)
			}, opts...)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			check(t)
		})
		t.Run("deadline while waiting for a lock", func(t *testing.T) {
			release := w.hold(t, ctx, "kl-b")
			cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			start := time.Now()
			err := p.run(cctx, bump, opts...)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want context.DeadlineExceeded", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("the call returned after %v", d)
			}
			w.requireHeld(t, ctx, 1, keys...) // the holder's alone
			release()
			check(t)
		})
		t.Run("lost COMMIT", func(t *testing.T) {
			proxy, err := faultproxy.Start(k.upstream(t, dsn), k.proto)
			if err != nil {
				t.Fatal(err)
			}
			defer proxy.Close()
			pp := k.on(t, k.via(t, dsn, proxy.Addr()))
			before := p.count(t, ctx, "SELECT n FROM kl_t WHERE id = 1")
			proxy.Arm(faultproxy.DropAfterCommit)
			err = pp.run(ctx, bump, opts...)
			if !errors.Is(err, txretry.ErrCommitUncertain) {
				t.Fatalf("err = %v, want ErrCommitUncertain", err)
			}
			if after := p.count(t, ctx, "SELECT n FROM kl_t WHERE id = 1"); after != before+1 {
				t.Errorf("n went from %d to %d", before, after)
			}
			check(t)
			requireIdle(t, pp)
			if k.sqlDriver == "pgx" {
				// With a verifier: the commit is found, the locks are gone.
				proxy.Arm(faultproxy.DropAfterCommit)
				if err := pp.run(ctx, bump, append(opts, txretry.WithXactStatusVerification())...); err != nil {
					t.Fatalf("verified call: %v", err)
				}
				check(t)
				requireIdle(t, pp)
			}
		})
		t.Run("caller's connection", func(t *testing.T) {
			// The locks are taken on the caller's *sql.Conn or *pgx.Conn,
			// released on it, and it stays usable.
			var run func(fn txFunc) error
			if k.name == "pgx-native" {
				conn, err := pgx.Connect(ctx, dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(context.Background())
				run = func(fn txFunc) error {
					return pgxretry.RunInTx(ctx, conn, func(ctx context.Context, tx pgx.Tx) error {
						return fn(ctx, pgxQuerier{h: tx})
					}, opts...)
				}
			} else {
				db, err := sql.Open(k.sqlDriver, dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				conn, err := db.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				run = func(fn txFunc) error {
					return txretry.RunInTx(ctx, conn, func(ctx context.Context, tx *sql.Tx) error {
						return fn(ctx, sqlQuerier{h: tx, rebind: p.d.rebind})
					}, opts...)
				}
			}
			if err := run(func(context.Context, querier) error { return errFn }); !errors.Is(err, errFn) {
				t.Fatalf("err = %v", err)
			}
			w.requireHeld(t, ctx, 0, keys...)
			if err := run(bump); err != nil {
				t.Fatal(err)
			}
			w.requireHeld(t, ctx, 0, keys...)
		})
	})
}
