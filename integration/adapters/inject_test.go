package adapters

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of the direct pool

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
	"github.com/txretry/txretry/txretry/txretrytest"
)

// forEachInjected runs test on every library of forEach, then on
// database/sql itself (pgx's stdlib driver, go-sql-driver/mysql) and on
// pgxretry over a pgxpool.Pool.
func forEachInjected(t *testing.T, test func(t *testing.T, s *subject)) {
	forEach(t, test)
	for _, pg := range []bool{true, false} {
		engine := map[bool]string{true: "postgres", false: "mysql"}[pg]
		t.Run("database-sql/"+engine, func(t *testing.T) {
			s := &subject{name: "database-sql/" + engine, pg: pg}
			if pg {
				s.direct, s.pool, s.proxy = pgPools(t, false)
			} else {
				s.direct, s.pool, s.proxy = mysqlPools(t)
			}
			s.run = sqlRun(s.pool, pg)
			test(t, s)
			if n := s.pool.Stats().InUse; n != 0 {
				t.Errorf("%d connection(s) still in use", n)
			}
		})
	}
	t.Run("pgxretry/postgres", func(t *testing.T) {
		s := &subject{name: "pgxretry/postgres", pg: true}
		dsn := dbservertest.Postgres(t)
		pool, err := pgxpool.New(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		if s.direct, err = sql.Open("pgx", dsn); err != nil {
			t.Fatal(err)
		}
		defer s.direct.Close()
		s.run = pgxRun(pool)
		test(t, s)
		if n := pool.Stat().AcquiredConns(); n != 0 {
			t.Errorf("%d connection(s) still in use", n)
		}
	})
}

func sqlRun(db *sql.DB, pg bool) func(context.Context, func(context.Context, txq) error, ...txretry.Option) error {
	return func(ctx context.Context, f func(context.Context, txq) error, opts ...txretry.Option) error {
		return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			return f(ctx, sqlQ{db, tx, pg})
		}, opts...)
	}
}

type sqlQ struct {
	db *sql.DB
	tx *sql.Tx
	pg bool
}

func (q sqlQ) rebind(query string) string {
	if q.pg {
		return rebindPG(query)
	}
	return query
}

func (q sqlQ) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.ExecContext(ctx, q.rebind(query), args...)
	return err
}

func (q sqlQ) one(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	return n, q.tx.QueryRowContext(ctx, q.rebind(query), args...).Scan(&n)
}

func (q sqlQ) savepoint(context.Context, func(context.Context, txq) error) error {
	return errors.New("no savepoints in these tests")
}

func (q sqlQ) nested(ctx context.Context, f func(context.Context, txq) error) error {
	return txretry.RunInTx(ctx, q.db, func(ctx context.Context, tx *sql.Tx) error { return f(ctx, sqlQ{q.db, tx, q.pg}) })
}

func pgxRun(pool *pgxpool.Pool) func(context.Context, func(context.Context, txq) error, ...txretry.Option) error {
	return func(ctx context.Context, f func(context.Context, txq) error, opts ...txretry.Option) error {
		return pgxretry.RunInTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			return f(ctx, pgxQ{pool, tx})
		}, opts...)
	}
}

type pgxQ struct {
	pool *pgxpool.Pool
	tx   pgx.Tx
}

func (q pgxQ) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.Exec(ctx, rebindPG(query), args...)
	return err
}

func (q pgxQ) one(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	return n, q.tx.QueryRow(ctx, rebindPG(query), args...).Scan(&n)
}

func (q pgxQ) savepoint(context.Context, func(context.Context, txq) error) error {
	return errors.New("no savepoints in these tests")
}

func (q pgxQ) nested(ctx context.Context, f func(context.Context, txq) error) error {
	return pgxretry.RunInTx(ctx, q.pool, func(ctx context.Context, tx pgx.Tx) error { return f(ctx, pgxQ{q.pool, tx}) })
}

// codeCounter counts the retryable errors an observer sees, by code.
type codeCounter struct {
	mu    sync.Mutex
	codes map[string]int
}

func (c *codeCounter) Observe(_ context.Context, e txretry.Event) {
	if e.Kind == txretry.AttemptFailed && e.Class == txretry.Retryable {
		c.mu.Lock()
		c.codes[e.Code]++
		c.mu.Unlock()
	}
}

func (c *codeCounter) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.codes)
}

// TestInjectedConflicts, for each library: under InjectConflicts(t, 1) a
// call runs fn twice (a nested call joining it too), the first attempt's
// insert is rolled back and its AfterCommit hook dropped, the observer
// sees one retryable 40001; a call allowed one attempt returns the
// injected 40001; WithConflicts acts on its context's calls alone; and
// once the test that injected ended, calls run once.
func TestInjectedConflicts(t *testing.T) {
	forEachInjected(t, func(t *testing.T, s *subject) {
		s.setup(t, "CREATE TABLE items (id INT PRIMARY KEY)")
		// place inserts id; it returns how many times fn and the nested
		// fn ran, and the attempts whose hooks ran.
		place := func(ctx context.Context, id int, opts ...txretry.Option) (runs, nestedRuns int, hooks []int, err error) {
			err = s.run(ctx, func(ctx context.Context, q txq) error {
				runs++
				n := txretry.Attempt(ctx)
				txretry.AfterCommit(ctx, func(context.Context) { hooks = append(hooks, n) })
				if err := q.exec(ctx, "INSERT INTO items (id) VALUES (?)", id); err != nil {
					return err
				}
				return q.nested(ctx, func(ctx context.Context, q txq) error {
					nestedRuns++
					return nil
				})
			}, opts...)
			return runs, nestedRuns, hooks, err
		}

		t.Run("process-wide", func(t *testing.T) {
			txretrytest.InjectConflicts(t, 1)
			obs := &codeCounter{codes: map[string]int{}}
			runs, nestedRuns, hooks, err := place(context.Background(), 1, txretry.WithObserver(obs))
			if err != nil || runs != 2 || nestedRuns != 2 || !slices.Equal(hooks, []int{2}) {
				t.Fatalf("err = %v, fn ran %d times, nested fn %d, hooks of attempts %v; want nil, 2, 2, [2]", err, runs, nestedRuns, hooks)
			}
			if got := obs.get(); !maps.Equal(got, map[string]int{"40001": 1}) {
				t.Errorf("retryable errors observed %v, want one 40001", got)
			}
			runs, _, hooks, err = place(context.Background(), 2, txretry.WithMaxAttempts(1))
			if !errors.Is(err, txretry.ErrRetriesExhausted) || !errors.Is(err, txretrytest.ErrInjected) ||
				!pgerr.IsSerializationFailure(err) || runs != 1 || len(hooks) != 0 {
				t.Fatalf("one attempt allowed: err = %v, fn ran %d times, hooks %v; want the injected 40001 after 1 run, no hook", err, runs, hooks)
			}
			if n := s.count(t, "SELECT COUNT(*) FROM items"); n != 1 {
				t.Errorf("%d rows, want 1: every injected conflict rolled its attempt back", n)
			}
		})
		if runs, _, _, err := place(context.Background(), 3); err != nil || runs != 1 {
			t.Fatalf("after the test that injected: err = %v, fn ran %d times; want nil, once", err, runs)
		}

		ctx := txretrytest.WithConflicts(context.Background(), 2)
		if runs, nestedRuns, hooks, err := place(ctx, 4); err != nil || runs != 3 || nestedRuns != 3 || !slices.Equal(hooks, []int{3}) {
			t.Fatalf("WithConflicts(ctx, 2): err = %v, fn ran %d times, nested fn %d, hooks %v; want nil, 3, 3, [3]", err, runs, nestedRuns, hooks)
		}
		if runs, _, _, err := place(context.Background(), 5); err != nil || runs != 1 {
			t.Fatalf("another context: err = %v, fn ran %d times; want nil, once", err, runs)
		}
		if n := s.count(t, "SELECT COUNT(*) FROM items"); n != 4 {
			t.Errorf("%d rows, want 4", n)
		}
	})
}

// TestInjectedLostCommits, for each library: under InjectLostCommits a
// call's first COMMIT, after the transaction committed or rolled back, is
// uncertain without a verifier and settled by each verifier, the effect
// applied once; WithLostCommits does the same for its context's calls.
func TestInjectedLostCommits(t *testing.T) {
	forEachInjected(t, func(t *testing.T, s *subject) {
		ddl, _ := txretry.CommitMarkerDDL(markerTable)
		s.setup(t, "CREATE TABLE effects (id VARCHAR(64) NOT NULL)", ddl)
		verifiers := effectVerifiers(s)
		for _, scope := range []string{"process", "context"} {
			for _, committed := range []bool{true, false} {
				for _, v := range []string{"none", "callback", "commit-marker", "xact-status"} {
					if v == "xact-status" && !s.pg {
						continue // PostgreSQL's alone
					}
					name := map[bool]string{true: "committed", false: "rolled-back"}[committed]
					t.Run(scope+"/"+name+"/"+v, func(t *testing.T) {
						id := scope + "-" + name + "-" + v
						ctx := context.Background()
						if scope == "process" {
							txretrytest.InjectLostCommits(t, committed)
						} else {
							ctx = txretrytest.WithLostCommits(ctx, committed)
						}
						opts := []txretry.Option{txretry.WithCommitTimeout(5 * time.Second)}
						if v != "none" {
							opts = append(opts, verifiers[v](id))
						}
						runs := 0
						err := s.run(ctx, func(ctx context.Context, q txq) error {
							runs++
							return q.exec(ctx, "INSERT INTO effects (id) VALUES (?)", id)
						}, opts...)
						applied := s.count(t, "SELECT COUNT(*) FROM effects WHERE id = ?", id)
						if v == "none" {
							if !errors.Is(err, txretry.ErrCommitUncertain) || !errors.Is(err, txretrytest.ErrInjected) || runs != 1 || applied != b2i(committed) {
								t.Fatalf("err = %v, runs %d, applied %d; want ErrCommitUncertain, 1 run, applied %d", err, runs, applied, b2i(committed))
							}
							return
						}
						if err != nil || applied != 1 || int64(runs) != 2-b2i(committed) {
							t.Fatalf("err = %v, runs %d, applied %d; want the verifier to settle it, applied once after %d run(s)", err, runs, applied, 2-b2i(committed))
						}
					})
				}
			}
		}
	})
}
