package txretry_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// The real-server tests of TxOrDB (a write through it rolled back with fn,
// seeing fn's own writes) are in the integration module, package adapters.

func TestTxOrDBFindsTheCallOnItsHandle(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	g := newFixture(t, &fakedb.Driver{})
	ctx := context.Background()
	if got := txretry.TxOrDB(ctx, f.db); got != f.db {
		t.Fatalf("outside any call: %v, want db", got)
	}
	var nilCtx context.Context // a nil context is in no call
	if got := txretry.TxOrDB(nilCtx, f.db); got != f.db {
		t.Fatalf("nil context: %v, want db", got)
	}
	type ctxKey struct{}
	err := txretry.RunInTx(ctx, f.db, func(ctx context.Context, tx *sql.Tx) error {
		derived, cancel := context.WithCancel(context.WithValue(ctx, ctxKey{}, 1))
		defer cancel()
		if got := txretry.TxOrDB(derived, f.db); got != tx {
			t.Errorf("in fn: %v, want fn's tx", got)
		}
		if got := txretry.TxOrDB(ctx, g.db); got != g.db {
			t.Errorf("in a call on another db: %v, want that db", got)
		}
		return txretry.RunInTx(ctx, g.db, func(ctx context.Context, gtx *sql.Tx) error {
			if got := txretry.TxOrDB(ctx, g.db); got != gtx {
				t.Errorf("in the inner call: %v, want its tx", got)
			}
			if got := txretry.TxOrDB(ctx, f.db); got != tx {
				t.Errorf("in the inner call, for the outer db: %v, want the outer tx", got)
			}
			return txretry.RunInTx(ctx, f.db, func(ctx context.Context, inner *sql.Tx) error {
				if inner != tx {
					t.Error("the innermost call did not join the outer call on its db")
				}
				if got := txretry.TxOrDB(ctx, f.db); got != inner {
					t.Errorf("in the innermost call: %v, want its tx", got)
				}
				return nil
			}, f.opts()...)
		}, g.opts()...)
	}, f.opts()...)
	if err != nil {
		t.Fatal(err)
	}
}

// After fn returned, a context it kept gives the ended transaction, never
// db: its statements fail with sql.ErrTxDone. Each attempt gives its own.
func TestTxOrDBAfterTheAttempt(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	var kept []context.Context
	var txs []*sql.Tx
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		kept, txs = append(kept, ctx), append(txs, tx)
		if len(kept) == 1 {
			return errSerialization
		}
		return nil
	}, f.opts()...)
	if err != nil || len(kept) != 2 {
		t.Fatalf("err=%v after %d attempts, want nil after 2", err, len(kept))
	}
	for i, ctx := range kept {
		got := txretry.TxOrDB(ctx, f.db)
		if got != txs[i] {
			t.Fatalf("attempt %d's context after the call: %v, want that attempt's tx", i+1, got)
		}
		if _, err := got.ExecContext(context.Background(), "UPDATE t SET v = 1"); !errors.Is(err, sql.ErrTxDone) {
			t.Errorf("a statement on attempt %d's tx after the call: %v, want sql.ErrTxDone", i+1, err)
		}
	}
	if n := f.drv.Stats().Execs; n != 0 {
		t.Errorf("%d statement(s) reached the database, want 0", n)
	}
}

// Goroutines that fn starts with its context get fn's transaction.
func TestTxOrDBFromGoroutinesOfFn(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				if txretry.TxOrDB(ctx, f.db) != tx {
					errs[i] = errors.New("a goroutine of fn did not get fn's tx")
					return
				}
				_, errs[i] = txretry.TxOrDB(ctx, f.db).ExecContext(ctx, "UPDATE t SET v = 1")
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}, f.opts()...)
	if err != nil {
		t.Fatal(err)
	}
}

// TxFromContext: the adapter's own transaction type, nothing for another.
func TestTxFromContext(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	if _, ok := txretry.TxFromContext[*txretry.SQLTx[*sql.Tx]](context.Background(), f.db); ok {
		t.Error("found a transaction outside any call")
	}
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		if got, ok := txretry.TxFromContext[*txretry.SQLTx[*sql.Tx]](ctx, f.db); !ok || got.Tx != tx {
			t.Errorf("TxFromContext = %v, %v; want fn's tx", got, ok)
		}
		if _, ok := txretry.TxFromContext[*foreignTx](ctx, f.db); ok {
			t.Error("found a transaction of another type")
		}
		if _, ok := txretry.TxFromContext[*txretry.SQLTx[*sql.Tx]](ctx, nil); ok {
			t.Error("found a transaction for a nil handle")
		}
		return nil
	}, f.opts()...)
	if err != nil {
		t.Fatal(err)
	}
}

type foreignTx struct{ txretry.Tx }

// A *sql.Conn is a handle of its own: its pool's TxOrDB is the pool.
func TestTxOrDBOnAConn(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	conn, err := f.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = txretry.RunInTx(context.Background(), conn, func(ctx context.Context, tx *sql.Tx) error {
		if got := txretry.TxOrDB(ctx, conn); got != tx {
			t.Errorf("on the conn: %v, want fn's tx", got)
		}
		if got := txretry.TxOrDB(ctx, f.db); got != f.db {
			t.Errorf("on its pool: %v, want the pool", got)
		}
		return nil
	}, f.opts()...)
	if err != nil {
		t.Fatal(err)
	}
}

// Another library's transaction that embeds its *sql.Tx, as sqlx's *sqlx.Tx
// does by pointer and bun's bun.Tx (inside bunretry's own type) by value:
// TxOrDB is that *sql.Tx, never db.
type (
	ByPointer struct{ *sql.Tx }
	ByValue   struct{ ByPointer }
)

type wrapAdapter[T txretry.SQLTransaction] struct {
	db   *sql.DB
	wrap func(*sql.Tx) T
	fn   func(ctx context.Context) error
}

func (a wrapAdapter[T]) Begin(ctx context.Context, _ txretry.TxOptions) (*txretry.SQLTx[T], error) {
	return txretry.BeginSQL(ctx, func(ctx context.Context) (T, error) {
		tx, err := a.db.BeginTx(ctx, nil)
		return a.wrap(tx), err
	})
}

func (a wrapAdapter[T]) Call(ctx context.Context, _ *txretry.SQLTx[T]) error { return a.fn(ctx) }
func (a wrapAdapter[T]) Handle() any                                         { return a.db }

func TestTxOrDBInAnotherAdaptersCall(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	var began *sql.Tx
	check := func(ctx context.Context) error {
		if got := txretry.TxOrDB(ctx, f.db); got != began {
			t.Errorf("TxOrDB: %T %p, want the *sql.Tx under the call's transaction %p", got, got, began)
		}
		return nil
	}
	err := errors.Join(
		txretry.Run(context.Background(), wrapAdapter[*ByPointer]{db: f.db, fn: check,
			wrap: func(tx *sql.Tx) *ByPointer { began = tx; return &ByPointer{tx} }}, f.opts()...),
		txretry.Run(context.Background(), wrapAdapter[ByValue]{db: f.db, fn: check,
			wrap: func(tx *sql.Tx) ByValue { began = tx; return ByValue{ByPointer{tx}} }}, f.opts()...),
	)
	if err != nil {
		t.Fatal(err)
	}
}
