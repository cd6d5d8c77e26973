package sqlxretry_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/dbtest"
	"github.com/txretry/txretry/txretry/internal/gatetest"
	"github.com/txretry/txretry/txretry/sqlxretry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// forEachEngine runs test on a fresh database of each server whose DSN is
// set, and checks that the test left no connection in use.
func forEachEngine(t *testing.T, test func(t *testing.T, db *sqlx.DB)) {
	dbtest.ForEach(t, "sqlxretry", func(t *testing.T, e dbtest.Engine, db *sql.DB) {
		test(t, sqlx.NewDb(db, e.Driver))
	})
}

func mustExec(t *testing.T, db *sqlx.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
	}
}

// Concurrent read-modify-write increments of one row under SERIALIZABLE
// lose updates unless retried: PostgreSQL reports 40001, MariaDB (whose
// serializable reads take shared locks) deadlocks with 1213. Every
// increment must land, and some must have been retried.
func TestLostUpdatesAreRetried(t *testing.T) {
	forEachEngine(t, func(t *testing.T, db *sqlx.DB) {
		mustExec(t, db, "CREATE TABLE counter (id INT PRIMARY KEY, v INT NOT NULL)", "INSERT INTO counter VALUES (1, 0)")
		const workers, each = 6, 5
		var retried atomic.Int32
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for range workers {
			wg.Go(func() {
				for range each {
					err := sqlxretry.RunInTx(ctx, db, func(ctx context.Context, tx *sqlx.Tx) error {
						if txretry.Attempt(ctx) > 1 {
							retried.Add(1)
						}
						var v int
						if err := tx.GetContext(ctx, &v, tx.Rebind("SELECT v FROM counter WHERE id = ?"), 1); err != nil {
							return err
						}
						time.Sleep(time.Millisecond) // widen the window
						_, err := tx.ExecContext(ctx, tx.Rebind("UPDATE counter SET v = ? WHERE id = ?"), v+1, 1)
						return err
					}, txretry.WithIsolation(sql.LevelSerializable), txretry.WithoutContentionManager())
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		var v int
		if err := db.Get(&v, "SELECT v FROM counter WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if v != workers*each {
			t.Errorf("counter = %d, want %d: an update was lost", v, workers*each)
		}
		if retried.Load() == 0 {
			t.Error("no attempt was retried: the test did not make a conflict")
		}
	})
}

// A permanent error (a duplicate key) is returned at once, unchanged, and
// the transaction rolled back.
func TestPermanentErrorReturnedAtOnce(t *testing.T) {
	forEachEngine(t, func(t *testing.T, db *sqlx.DB) {
		mustExec(t, db, "CREATE TABLE items (id INT PRIMARY KEY)", "INSERT INTO items VALUES (1)")
		calls := 0
		err := sqlxretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sqlx.Tx) error {
			calls++
			if _, err := tx.ExecContext(ctx, "INSERT INTO items VALUES (2)"); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO items VALUES (1)")
			return err
		})
		if !pgerr.IsUniqueViolation(err) && !mysqlerr.Has(err, mysqlerr.DupEntry) || calls != 1 {
			t.Fatalf("err = %v after %d calls; want the duplicate-key error after 1", err, calls)
		}
		var n int
		if err := db.Get(&n, "SELECT COUNT(*) FROM items"); err != nil || n != 1 {
			t.Fatalf("%d rows (%v); want the failed transaction rolled back", n, err)
		}
	})
}

// A call inside fn on the same pool, through the *sqlx.DB or a copy of it,
// or txretry.RunInTx on the pool, joins the outer transaction; an
// sqlxretry call inside txretry.RunInTx on the pool is refused rather than
// run as a second transaction; fn's own Commit is refused.
func TestNestedCallJoinsAndFnCannotCommit(t *testing.T) {
	forEachEngine(t, func(t *testing.T, db *sqlx.DB) {
		err := sqlxretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sqlx.Tx) error {
			for _, d := range []*sqlx.DB{db, db.Unsafe()} {
				err := sqlxretry.RunInTx(ctx, d, func(ctx context.Context, inner *sqlx.Tx) error {
					if inner != tx {
						t.Error("the nested call began a transaction of its own")
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			err := txretry.RunInTx(ctx, db.DB, func(ctx context.Context, inner *sql.Tx) error {
				if inner != tx.Tx {
					t.Error("txretry.RunInTx on the pool inside fn began a transaction of its own")
				}
				return nil
			})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// The other way round a *sqlx.Tx cannot be made.
		err = txretry.RunInTx(context.Background(), db.DB, func(ctx context.Context, _ *sql.Tx) error {
			return sqlxretry.RunInTx(ctx, db, func(context.Context, *sqlx.Tx) error { return nil })
		})
		if !errors.Is(err, txretry.ErrInvalidOption) {
			t.Errorf("sqlxretry.RunInTx inside txretry.RunInTx on the pool: %v, want ErrInvalidOption", err)
		}
		err = sqlxretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sqlx.Tx) error { return tx.Commit() })
		if !errors.Is(err, txretry.ErrTxEndedByFn) || errors.Is(err, txretry.ErrCommitUncertain) {
			t.Fatalf("fn committing itself: %v, want ErrTxEndedByFn", err)
		}
	})
}

// The handle is the pool: its default contention manager gates the calls
// of db and of its copies, which queue behind each other at the closed gate
// of their label.
func TestContentionManagerPerPool(t *testing.T) {
	forEachEngine(t, func(t *testing.T, db *sqlx.DB) {
		gatetest.Close(t, db.DB, "k")
		err := sqlxretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sqlx.Tx) error {
			cctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			err := sqlxretry.RunInTx(cctx, db.Unsafe(), func(context.Context, *sqlx.Tx) error { return nil }, txretry.WithLabel("k"))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a call of the same domain on a copy ran at once: %v", err)
			}
			return nil
		}, txretry.WithLabel("k"))
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestInvalidInput(t *testing.T) {
	fn := func(context.Context, *sqlx.Tx) error { return nil }
	if err := sqlxretry.RunInTx(context.Background(), nil, fn); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Errorf("nil db: %v", err)
	}
	db := sqlx.NewDb(&sql.DB{}, "pgx")
	if err := sqlxretry.RunInTx(context.Background(), db, nil); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Errorf("nil fn: %v", err)
	}
	if err := sqlxretry.RunInTx(context.Background(), db, fn, txretry.WithLockTimeout(time.Second)); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Errorf("WithLockTimeout on a driver whose database is unknown: %v", err)
	}
}
