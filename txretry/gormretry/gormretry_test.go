package gormretry_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/gormretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/internal/gatetest"
)

// The real-server tests (conflicts, deadlocks, lost COMMITs, savepoints,
// TranslateError) are in the integration module, package adapters; these
// need no database.

// GORM's prepared-statement cache (PrepareStmt) starts an expiry goroutine
// that it never stops (gorm/internal/lru says so); it is GORM's, not the
// adapter's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"))
}

func open(t *testing.T, drv *fakedb.Driver, cfg *gorm.Config) (*gorm.DB, *sql.DB) {
	t.Helper()
	sqlDB := drv.DB()
	t.Cleanup(func() {
		if n := sqlDB.Stats().InUse; n != 0 {
			t.Errorf("%d connection(s) still in use", n)
		}
		sqlDB.Close()
	})
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return db, sqlDB
}

func TestInvalidInput(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context, *gorm.DB) error { return nil }
	for name, db := range map[string]*gorm.DB{"nil": nil, "zero": {}, "no statement": {Config: &gorm.Config{}}} {
		if err := gormretry.RunInTx(ctx, db, fn); !errors.Is(err, txretry.ErrInvalidOption) {
			t.Errorf("%s db: %v", name, err)
		}
	}
	db, _ := open(t, &fakedb.Driver{}, &gorm.Config{})
	if err := gormretry.RunInTx(ctx, db, nil); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Errorf("nil fn: %v", err)
	}
	if err := gormretry.RunInTx(ctx, db, fn, txretry.WithLockTimeout(time.Second)); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Errorf("WithLockTimeout on a driver whose database is unknown: %v", err)
	}
	// A *gorm.DB carrying an error: refused, described without its text.
	secret := errors.New("duplicate entry 'alice@example.com'")
	bad := db.Session(&gorm.Session{})
	bad.Error = secret
	err := gormretry.RunInTx(ctx, bad, fn)
	if !errors.Is(err, txretry.ErrInvalidOption) || !errors.Is(err, secret) || strings.Contains(err.Error(), "alice") {
		t.Errorf("db with an error: %v", err)
	}
}

// Sessions of one gorm.Open share the pool's handle: a call inside fn
// joins, whichever session of db, or fn's own tx, it is given; fn's tx
// carries fn's context.
func TestNestedCallsJoinOnThePool(t *testing.T) {
	drv := &fakedb.Driver{}
	db, _ := open(t, drv, &gorm.Config{})
	err := gormretry.RunInTx(context.Background(), db.Session(&gorm.Session{Logger: logger.Discard}), func(ctx context.Context, tx *gorm.DB) error {
		if tx.Statement.Context != ctx {
			t.Error("fn's *gorm.DB does not carry fn's context")
		}
		for _, inner := range []*gorm.DB{db, db.Session(&gorm.Session{}), db.WithContext(context.Background()), tx} {
			err := gormretry.RunInTx(ctx, inner, func(ctx context.Context, itx *gorm.DB) error {
				if itx.Statement.ConnPool != tx.Statement.ConnPool {
					t.Error("the nested call got another transaction")
				}
				return itx.Exec("UPDATE t SET v = 1").Error
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := drv.Stats(); s.Begins != 1 || s.Commits != 1 || s.Execs != 4 {
		t.Fatalf("%+v, want one transaction with 4 statements", s)
	}
}

// gormretry and txretry.RunInTx on the same *sql.DB join each other.
func TestJoinsTxretryRunInTxOnTheSamePool(t *testing.T) {
	drv := &fakedb.Driver{}
	db, sqlDB := open(t, drv, &gorm.Config{})
	err := txretry.RunInTx(context.Background(), sqlDB, func(ctx context.Context, stx *sql.Tx) error {
		return gormretry.RunInTx(ctx, db, func(ctx context.Context, tx *gorm.DB) error {
			if tx.Statement.ConnPool != stx {
				t.Error("gormretry inside txretry.RunInTx began its own transaction")
			}
			return txretry.RunInTx(ctx, sqlDB, func(ctx context.Context, inner *sql.Tx) error {
				if inner != stx {
					t.Error("txretry.RunInTx inside gormretry began its own transaction")
				}
				return nil
			})
		})
	})
	if err != nil || drv.Stats().Begins != 1 {
		t.Fatalf("err = %v, %d transactions, want one", err, drv.Stats().Begins)
	}
}

// A *gorm.DB in a transaction, given with a context that is not fn's, does
// not begin a second transaction.
func TestTransactionOutsideItsCall(t *testing.T) {
	db, _ := open(t, &fakedb.Driver{}, &gorm.Config{})
	var kept *gorm.DB
	err := gormretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *gorm.DB) error {
		kept = tx
		return gormretry.RunInTx(context.Background(), tx, func(context.Context, *gorm.DB) error { return nil })
	})
	if !errors.Is(err, txretry.ErrInvalidOption) {
		t.Fatalf("err = %v, want ErrInvalidOption", err)
	}
	if err := gormretry.RunInTx(context.Background(), kept, func(context.Context, *gorm.DB) error { return nil }); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Fatalf("kept tx: %v, want ErrInvalidOption", err)
	}
}

// fn ending the transaction itself is reported, not taken for an
// uncertain commit.
func TestFnCannotCommit(t *testing.T) {
	db, _ := open(t, &fakedb.Driver{}, &gorm.Config{})
	err := gormretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *gorm.DB) error { return tx.Commit().Error })
	if !errors.Is(err, txretry.ErrTxEndedByFn) || errors.Is(err, txretry.ErrCommitUncertain) {
		t.Fatalf("err = %v, want ErrTxEndedByFn", err)
	}
}

// With PrepareStmt, fn's statements go through GORM's statement cache on
// the attempt's transaction.
func TestPrepareStmtSession(t *testing.T) {
	db, _ := open(t, &fakedb.Driver{}, &gorm.Config{PrepareStmt: true})
	err := gormretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *gorm.DB) error {
		if _, ok := tx.Statement.ConnPool.(*gorm.PreparedStmtTX); !ok {
			t.Errorf("ConnPool is %T, want *gorm.PreparedStmtTX", tx.Statement.ConnPool)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Every session of one pool has the pool's default manager: a call on the
// pool queues behind a session's call at the closed gate of their label.
func TestContentionManagerPerPool(t *testing.T) {
	db, sqlDB := open(t, &fakedb.Driver{}, &gorm.Config{})
	gatetest.Close(t, sqlDB, "k")
	err := gormretry.RunInTx(context.Background(), db.Session(&gorm.Session{}), func(ctx context.Context, tx *gorm.DB) error {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err := txretry.RunInTx(cctx, sqlDB, func(context.Context, *sql.Tx) error { return nil }, txretry.WithLabel("k"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a call of the same domain on the pool ran at once: %v", err)
		}
		return nil
	}, txretry.WithLabel("k"))
	if err != nil {
		t.Fatal(err)
	}
}

type item struct {
	ID   int `gorm:"primaryKey;autoIncrement:false"`
	Name string
}

// GORM's model calls inside fn (Create and Save open a transaction of
// their own outside one) run in the attempt's transaction: no second
// BEGIN, one COMMIT.
func TestModelCallsStayInTheTransaction(t *testing.T) {
	drv := &fakedb.Driver{}
	db, _ := open(t, drv, &gorm.Config{Logger: logger.Discard})
	err := gormretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *gorm.DB) error {
		it := item{ID: 1, Name: "a"}
		if err := tx.Create(&it).Error; err != nil {
			return err
		}
		it.Name = "b"
		if err := tx.Save(&it).Error; err != nil {
			return err
		}
		return tx.Delete(&it).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	if s := drv.Stats(); s.Begins != 1 || s.Commits != 1 || s.Execs+s.Queries < 3 {
		t.Fatalf("%+v, want the model calls in one transaction", s)
	}
}
