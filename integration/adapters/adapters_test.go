package adapters

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
)

// codes records the SQLSTATEs and error numbers of the failed attempts.
type codes struct {
	mu  sync.Mutex
	all []string
}

func (c *codes) option() txretry.Option {
	return txretry.WithObserver(txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
		if e.Kind == txretry.AttemptFailed {
			c.mu.Lock()
			c.all = append(c.all, e.Code)
			c.mu.Unlock()
		}
	}))
}

// only reports whether some attempts failed, and all with one of want.
func (c *codes) only(want ...string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.all) > 0 && !slices.ContainsFunc(c.all, func(s string) bool { return !slices.Contains(want, s) })
}

// Concurrent read-modify-write increments of one row under SERIALIZABLE
// lose updates unless retried: PostgreSQL reports 40001, MariaDB (whose
// serializable reads take shared locks) deadlocks with 1213. Every
// increment must land. Through GORM with TranslateError on; and once more
// with the increment inside the library's nested transaction (a
// savepoint), whose error fn returns: a savepoint does not save a
// transaction the server chose as a victim, the whole one is retried.
func TestLostUpdatesRetried(t *testing.T) {
	for _, inSavepoint := range []bool{false, true} {
		t.Run(fmt.Sprintf("savepoint=%v", inSavepoint), func(t *testing.T) {
			forEach(t, func(t *testing.T, s *subject) { lostUpdates(t, s, inSavepoint) })
		})
	}
}

func lostUpdates(t *testing.T, s *subject, inSavepoint bool) {
	s.setup(t, "CREATE TABLE counter (id INT PRIMARY KEY, v INT NOT NULL)", "INSERT INTO counter VALUES (1, 0)")
	const workers, each = 6, 4
	var seen codes
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Every worker's first attempt reads before any of them writes, so
	// the updates conflict whatever the machine's timing (a loaded one
	// once ran all 24 calls one after another, with no conflict to retry).
	var read sync.WaitGroup
	read.Add(workers)
	increment := func(ctx context.Context, q txq, first *bool) error {
		v, err := q.one(ctx, "SELECT v FROM counter WHERE id = ?", 1)
		if err != nil {
			return err
		}
		if *first {
			*first = false
			read.Done()
			if !waitTimeout(&read, 10*time.Second) {
				return errors.New("the other workers did not read the counter")
			}
		}
		time.Sleep(time.Millisecond) // widen the window
		return q.exec(ctx, "UPDATE counter SET v = ? WHERE id = ?", v+1, 1)
	}
	for range workers {
		wg.Go(func() {
			first := true
			for range each {
				err := s.run(ctx, func(ctx context.Context, q txq) error {
					if inSavepoint {
						return q.savepoint(ctx, func(ctx context.Context, q txq) error { return increment(ctx, q, &first) })
					}
					return increment(ctx, q, &first)
				}, txretry.WithIsolation(sql.LevelSerializable), txretry.WithoutContentionManager(), seen.option())
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if v := s.count(t, "SELECT v FROM counter WHERE id = 1"); v != workers*each {
		t.Errorf("counter = %d, want %d: an update was lost", v, workers*each)
	}
	if !seen.only("40001", "1213") {
		t.Errorf("failed attempts' codes %v, want some, all 40001 or 1213", seen.all)
	}
}

// Two transactions take two rows in opposite orders, each waiting until
// the other holds its first row: a genuine deadlock (40P01, 1213). The
// victim is retried and both transfers land exactly once.
func TestDeadlockRetried(t *testing.T) {
	forEach(t, func(t *testing.T, s *subject) {
		s.setup(t, "CREATE TABLE acct (id INT PRIMARY KEY, v INT NOT NULL)", "INSERT INTO acct VALUES (1, 100), (2, 100)")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var holding sync.WaitGroup
		holding.Add(2)
		var seen codes
		var wg sync.WaitGroup
		for _, order := range [][2]int{{1, 2}, {2, 1}} {
			wg.Go(func() {
				first := true
				err := s.run(ctx, func(ctx context.Context, q txq) error {
					if err := q.exec(ctx, "UPDATE acct SET v = v - 10 WHERE id = ?", order[0]); err != nil {
						return err
					}
					if first { // wait for the other to hold its first row, once
						first = false
						holding.Done()
						if !waitTimeout(&holding, 10*time.Second) {
							return errors.New("the other transaction did not take its first row")
						}
					}
					return q.exec(ctx, "UPDATE acct SET v = v + 10 WHERE id = ?", order[1])
				}, txretry.WithoutContentionManager(), seen.option())
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := s.count(t, "SELECT COUNT(*) FROM acct WHERE v = 100"); n != 2 {
			t.Errorf("%d of 2 accounts hold 100: a transfer was lost or doubled", n)
		}
		// A victim retried at once can take its first row again before
		// the survivor, woken, has updated it: a second genuine deadlock
		// now and then, retried like the first.
		if !seen.only("40P01", "1213") {
			t.Errorf("failed attempts' codes %v, want deadlocks only (40P01 or 1213)", seen.all)
		}
	})
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// A duplicate key is returned at once (GORM translates it: its
// ErrDuplicatedKey, PostgreSQL's 23505 still inside), the transaction
// rolled back.
func TestPermanentErrorAtOnce(t *testing.T) {
	forEach(t, func(t *testing.T, s *subject) {
		s.setup(t, "CREATE TABLE items (id INT PRIMARY KEY)", "INSERT INTO items VALUES (1)")
		calls := 0
		err := s.run(context.Background(), func(ctx context.Context, q txq) error {
			calls++
			if err := q.exec(ctx, "INSERT INTO items VALUES (2)"); err != nil {
				return err
			}
			return q.exec(ctx, "INSERT INTO items VALUES (1)")
		})
		dup := pgerr.IsUniqueViolation(err) || mysqlerr.Has(err, mysqlerr.DupEntry) || errors.Is(err, gorm.ErrDuplicatedKey)
		if !dup || calls != 1 {
			t.Fatalf("err = %v after %d calls; want the duplicate-key error after 1", err, calls)
		}
		if n := s.count(t, "SELECT COUNT(*) FROM items"); n != 1 {
			t.Fatalf("%d rows; want the failed transaction rolled back", n)
		}
		if strings.HasPrefix(s.name, "gorm") {
			// What gormretry's doc says of TranslateError: PostgreSQL's
			// code stays inside gorm's error, MySQL's number is dropped.
			_, hasNumber := mysqlerr.Number(err)
			if !errors.Is(err, gorm.ErrDuplicatedKey) || s.pg != pgerr.IsUniqueViolation(err) || hasNumber {
				t.Fatalf("GORM's translated duplicate key: %v (%T)", err, err)
			}
		}
	})
}

const markerTable = "txretry_markers"

// A connection lost at COMMIT: uncertain without a verifier, resolved by
// each verifier, the effect applied exactly once.
func TestLostCommit(t *testing.T) {
	forEach(t, func(t *testing.T, s *subject) {
		ddl, _ := txretry.CommitMarkerDDL(markerTable)
		s.setup(t, "CREATE TABLE effects (id VARCHAR(64) NOT NULL)", ddl)
		verifiers := effectVerifiers(s)
		for _, fault := range []faultproxy.Fault{faultproxy.DropBeforeCommit, faultproxy.DropAfterCommit} {
			committed := fault == faultproxy.DropAfterCommit
			for _, v := range []string{"none", "callback", "commit-marker", "xact-status"} {
				if v == "xact-status" && !s.pg {
					continue // PostgreSQL's alone
				}
				t.Run(fault.String()+"/"+v, func(t *testing.T) {
					id := fault.String() + "-" + v
					opts := []txretry.Option{txretry.WithCommitTimeout(5 * time.Second)}
					if v != "none" {
						opts = append(opts, verifiers[v](id))
					}
					runs := 0
					s.proxy.Arm(fault)
					err := s.run(context.Background(), func(ctx context.Context, q txq) error {
						runs++
						return q.exec(ctx, "INSERT INTO effects (id) VALUES (?)", id)
					}, opts...)
					s.proxy.Arm(faultproxy.None)
					applied := s.count(t, "SELECT COUNT(*) FROM effects WHERE id = ?", id)
					if v == "none" {
						if !errors.Is(err, txretry.ErrCommitUncertain) || runs != 1 || applied != b2i(committed) {
							t.Fatalf("err = %v, runs %d, applied %d; want ErrCommitUncertain, 1 run, applied %d", err, runs, applied, b2i(committed))
						}
						return
					}
					if err != nil || applied != 1 || int64(runs) != 2-b2i(committed) {
						t.Fatalf("err = %v, runs %d, applied %d; want the verifier to resolve it, applied once", err, runs, applied)
					}
				})
			}
		}
	})
}

// effectVerifiers are the verifiers of the lost-commit tests by name,
// each given the id of the row of table effects that the call inserts.
func effectVerifiers(s *subject) map[string]func(id string) txretry.Option {
	verifiers := map[string]func(id string) txretry.Option{
		"callback": func(id string) txretry.Option {
			return txretry.WithVerify(func(ctx context.Context) (bool, error) {
				var n int
				err := s.direct.QueryRowContext(ctx, rebind(s, "SELECT COUNT(*) FROM effects WHERE id = ?"), id).Scan(&n)
				return n > 0, err
			})
		},
		"commit-marker": func(string) txretry.Option { return txretry.WithCommitMarker(markerTable) },
	}
	if s.pg {
		verifiers["xact-status"] = func(string) txretry.Option { return txretry.WithXactStatusVerification() }
	}
	return verifiers
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func rebind(s *subject, q string) string {
	if s.pg {
		return rebindPG(q)
	}
	return q
}

// A call inside fn with fn's context joins the outer transaction; the
// library's own nested transaction inside fn is a savepoint that rolls
// back alone, as the library documents; the outer call commits the rest.
func TestNestedAndSavepoints(t *testing.T) {
	forEach(t, func(t *testing.T, s *subject) {
		s.setup(t, "CREATE TABLE items (id INT PRIMARY KEY)")
		errUndo := errors.New("undo")
		err := s.run(context.Background(), func(ctx context.Context, q txq) error {
			if err := q.exec(ctx, "INSERT INTO items VALUES (1)"); err != nil {
				return err
			}
			err := q.nested(ctx, func(ctx context.Context, inner txq) error {
				if n, err := inner.one(ctx, "SELECT COUNT(*) FROM items"); err != nil || n != 1 {
					return fmt.Errorf("the nested call does not see the outer transaction's row: %d, %v", n, err)
				}
				return inner.exec(ctx, "INSERT INTO items VALUES (2)")
			})
			if err != nil {
				return err
			}
			err = q.savepoint(ctx, func(ctx context.Context, sp txq) error {
				if err := sp.exec(ctx, "INSERT INTO items VALUES (3)"); err != nil {
					return err
				}
				return errUndo
			})
			if err != nil && !errors.Is(err, errUndo) {
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := s.count(t, "SELECT COUNT(*) FROM items WHERE id IN (1, 2)"); n != 2 {
			t.Errorf("%d of the 2 joined inserts committed", n)
		}
		if n := s.count(t, "SELECT COUNT(*) FROM items WHERE id = 3"); n != 0 {
			t.Errorf("the savepoint's insert survived its rollback")
		}
	})
}
