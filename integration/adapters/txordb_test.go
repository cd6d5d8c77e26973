package adapters

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/bunretry"
	"github.com/txretry/txretry/txretry/gormretry"
	"github.com/txretry/txretry/txretry/pgxretry"
	"github.com/txretry/txretry/txretry/sqlxretry"
)

// ordb is one library's RunInTx and TxOrDB on two handles (0 and 1), two
// pools on one database. Queries are written with ? placeholders.
type ordb struct {
	// run is RunInTx on handle h; fn gets fn's transaction as same
	// compares it.
	run func(ctx context.Context, h int, fn func(ctx context.Context, tx any) error, opts ...txretry.Option) error
	// same is what TxOrDB(ctx, handle h) returns, in the form run gives
	// fn's transaction, or handle itself.
	same   func(ctx context.Context, h int) any
	handle func(h int) any
	// exec and one run a statement through TxOrDB(ctx, handle h).
	exec func(ctx context.Context, h int, query string, args ...any) error
	one  func(ctx context.Context, h int, query string, args ...any) (int64, error)
	// done is the error of a statement on an ended transaction.
	done error
	// oneConn limits handle h's pool to one connection (nil: pgx's
	// pools, whose size is fixed when made).
	oneConn func(h int)
}

type ordbLib struct {
	name     string
	postgres bool // PostgreSQL only
	open     func(t *testing.T, pg bool, dsn string) *ordb
}

var ordbLibs = []ordbLib{
	{name: "txretry", open: openOrdbSQL},
	{name: "pgxretry", postgres: true, open: openOrdbPgx},
	{name: "sqlx", open: openOrdbSQLX},
	{name: "gorm", open: openOrdbGORM},
	{name: "bun", open: openOrdbBun},
}

func ordbPools(t *testing.T, pg bool, dsn string) [2]*sql.DB {
	t.Helper()
	driver := "mysql"
	if pg {
		driver = "pgx"
	}
	var pools [2]*sql.DB
	for i := range pools {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if n := db.Stats().InUse; n != 0 {
				t.Errorf("%d connection(s) still in use", n)
			}
			db.Close()
		})
		pools[i] = db
	}
	return pools
}

func ordbRebind(pg bool, q string) string {
	if pg {
		return rebindPG(q)
	}
	return q
}

func openOrdbSQL(t *testing.T, pg bool, dsn string) *ordb {
	hs := ordbPools(t, pg, dsn)
	return &ordb{
		run: func(ctx context.Context, h int, fn func(context.Context, any) error, opts ...txretry.Option) error {
			return txretry.RunInTx(ctx, hs[h], func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx) }, opts...)
		},
		same:   func(ctx context.Context, h int) any { return txretry.TxOrDB(ctx, hs[h]) },
		handle: func(h int) any { return hs[h] },
		exec: func(ctx context.Context, h int, q string, args ...any) error {
			_, err := txretry.TxOrDB(ctx, hs[h]).ExecContext(ctx, ordbRebind(pg, q), args...)
			return err
		},
		one: func(ctx context.Context, h int, q string, args ...any) (n int64, err error) {
			return n, txretry.TxOrDB(ctx, hs[h]).QueryRowContext(ctx, ordbRebind(pg, q), args...).Scan(&n)
		},
		done:    sql.ErrTxDone,
		oneConn: func(h int) { hs[h].SetMaxOpenConns(1) },
	}
}

func openOrdbPgx(t *testing.T, _ bool, dsn string) *ordb {
	var hs [2]*pgxpool.Pool
	for i := range hs {
		p, err := pgxpool.New(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		hs[i] = p
	}
	return &ordb{
		run: func(ctx context.Context, h int, fn func(context.Context, any) error, opts ...txretry.Option) error {
			return pgxretry.RunInTx(ctx, hs[h], func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, tx) }, opts...)
		},
		same:   func(ctx context.Context, h int) any { return pgxretry.TxOrDB(ctx, hs[h]) },
		handle: func(h int) any { return hs[h] },
		exec: func(ctx context.Context, h int, q string, args ...any) error {
			_, err := pgxretry.TxOrDB(ctx, hs[h]).Exec(ctx, rebindPG(q), args...)
			return err
		},
		one: func(ctx context.Context, h int, q string, args ...any) (n int64, err error) {
			return n, pgxretry.TxOrDB(ctx, hs[h]).QueryRow(ctx, rebindPG(q), args...).Scan(&n)
		},
		done: pgx.ErrTxClosed,
	}
}

func openOrdbSQLX(t *testing.T, pg bool, dsn string) *ordb {
	pools := ordbPools(t, pg, dsn)
	driver := "mysql"
	if pg {
		driver = "pgx"
	}
	hs := [2]*sqlx.DB{sqlx.NewDb(pools[0], driver), sqlx.NewDb(pools[1], driver)}
	return &ordb{
		run: func(ctx context.Context, h int, fn func(context.Context, any) error, opts ...txretry.Option) error {
			return sqlxretry.RunInTx(ctx, hs[h], func(ctx context.Context, tx *sqlx.Tx) error { return fn(ctx, tx) }, opts...)
		},
		same:   func(ctx context.Context, h int) any { return sqlxretry.TxOrDB(ctx, hs[h]) },
		handle: func(h int) any { return hs[h] },
		exec: func(ctx context.Context, h int, q string, args ...any) error {
			d := sqlxretry.TxOrDB(ctx, hs[h])
			_, err := d.ExecContext(ctx, d.Rebind(q), args...)
			return err
		},
		one: func(ctx context.Context, h int, q string, args ...any) (n int64, err error) {
			d := sqlxretry.TxOrDB(ctx, hs[h])
			return n, d.GetContext(ctx, &n, d.Rebind(q), args...)
		},
		done:    sql.ErrTxDone,
		oneConn: func(h int) { pools[h].SetMaxOpenConns(1) },
	}
}

func openOrdbGORM(t *testing.T, pg bool, dsn string) *ordb {
	pools := ordbPools(t, pg, dsn)
	var hs [2]*gorm.DB
	for i, pool := range pools {
		var dialector gorm.Dialector = mysql.New(mysql.Config{Conn: pool})
		if pg {
			dialector = postgres.New(postgres.Config{Conn: pool})
		}
		db, err := gorm.Open(dialector, &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		hs[i] = db
	}
	return &ordb{
		run: func(ctx context.Context, h int, fn func(context.Context, any) error, opts ...txretry.Option) error {
			return gormretry.RunInTx(ctx, hs[h], func(ctx context.Context, tx *gorm.DB) error { return fn(ctx, tx.Statement.ConnPool) }, opts...)
		},
		same:   func(ctx context.Context, h int) any { return gormretry.TxOrDB(ctx, hs[h]).Statement.ConnPool },
		handle: func(h int) any { return pools[h] },
		exec: func(ctx context.Context, h int, q string, args ...any) error {
			return gormretry.TxOrDB(ctx, hs[h]).Exec(q, args...).Error
		},
		one: func(ctx context.Context, h int, q string, args ...any) (n int64, err error) {
			return n, gormretry.TxOrDB(ctx, hs[h]).Raw(q, args...).Scan(&n).Error
		},
		done:    sql.ErrTxDone,
		oneConn: func(h int) { pools[h].SetMaxOpenConns(1) },
	}
}

func openOrdbBun(t *testing.T, pg bool, dsn string) *ordb {
	pools := ordbPools(t, pg, dsn)
	var hs [2]*bun.DB
	for i, pool := range pools {
		if pg {
			hs[i] = bun.NewDB(pool, pgdialect.New())
		} else {
			hs[i] = bun.NewDB(pool, mysqldialect.New())
		}
	}
	return &ordb{
		run: func(ctx context.Context, h int, fn func(context.Context, any) error, opts ...txretry.Option) error {
			return bunretry.RunInTx(ctx, hs[h], func(ctx context.Context, tx bun.Tx) error { return fn(ctx, tx.Tx) }, opts...)
		},
		same: func(ctx context.Context, h int) any {
			if tx, ok := bunretry.TxOrDB(ctx, hs[h]).(bun.Tx); ok {
				return tx.Tx
			}
			return bunretry.TxOrDB(ctx, hs[h])
		},
		handle: func(h int) any { return hs[h] },
		exec: func(ctx context.Context, h int, q string, args ...any) error {
			_, err := bunretry.TxOrDB(ctx, hs[h]).NewRaw(q, args...).Exec(ctx)
			return err
		},
		one: func(ctx context.Context, h int, q string, args ...any) (n int64, err error) {
			return n, bunretry.TxOrDB(ctx, hs[h]).NewRaw(q, args...).Scan(ctx, &n)
		},
		done:    sql.ErrTxDone,
		oneConn: func(h int) { pools[h].SetMaxOpenConns(1) },
	}
}

// TestTxOrDB: every library's TxOrDB gives fn's transaction inside fn (a
// write through it sees the transaction's own rows and is rolled back with
// it, a retry's attempt gets its own), the handle outside any call and in
// a call on another handle (whose rollback then leaves the write), the
// outer call's transaction from a call on another handle nested in it, and
// the ended transaction, never the handle, from a context kept after fn
// returned.
func TestTxOrDB(t *testing.T) { forEachOrdb(t, testTxOrDB) }

// forEachOrdb runs test with every library on a fresh database of each
// server it supports.
func forEachOrdb(t *testing.T, test func(t *testing.T, o *ordb)) {
	for _, lib := range ordbLibs {
		for _, pg := range []bool{true, false} {
			if lib.postgres && !pg {
				continue
			}
			engine := "mysql" // MySQL or MariaDB, whichever TXRETRY_MYSQL_DSN names
			if pg {
				engine = "postgres"
			}
			t.Run(lib.name+"/"+engine, func(t *testing.T) {
				var dsn string
				if pg {
					dsn = dbservertest.Postgres(t)
				} else {
					dsn = dbservertest.MySQL(t)
				}
				test(t, lib.open(t, pg, dsn))
			})
		}
	}
}

func testTxOrDB(t *testing.T, o *ordb) {
	bg := t.Context()
	errUndo := errors.New("undo")
	count := func(id int) int64 {
		t.Helper()
		n, err := o.one(bg, 0, "SELECT COUNT(*) FROM items WHERE id = ?", id)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := o.exec(bg, 0, "CREATE TABLE items (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}

	// Outside any call: the handle, whose writes commit at once.
	if got := o.same(bg, 0); got != o.handle(0) {
		t.Fatalf("outside any call: %T, want the handle", got)
	}
	if err := o.exec(bg, 0, "INSERT INTO items (id) VALUES (?)", 1); err != nil || count(1) != 1 {
		t.Fatalf("insert outside any call: %v, %d row(s)", err, count(1))
	}

	// Inside fn: fn's transaction, with its own uncommitted rows; rolled
	// back with it; each attempt its own.
	var first any
	err := o.run(bg, 0, func(ctx context.Context, tx any) error {
		if got := o.same(ctx, 0); got != tx {
			t.Errorf("attempt %d: TxOrDB is %T, want fn's tx", txretry.Attempt(ctx), got)
		}
		if txretry.Attempt(ctx) == 1 {
			first = tx
			if err := o.exec(ctx, 0, "INSERT INTO items (id) VALUES (?)", 2); err != nil {
				return err
			}
			return errUndo // retried, see below
		}
		if tx == first {
			t.Error("the retry got the first attempt's transaction")
		}
		if n, err := o.one(ctx, 0, "SELECT COUNT(*) FROM items WHERE id = ?", 2); err != nil || n != 0 {
			t.Errorf("the retry sees %d of the first attempt's rows (%v), want 0", n, err)
		}
		if err := o.exec(ctx, 0, "INSERT INTO items (id) VALUES (?)", 3); err != nil {
			return err
		}
		if n, err := o.one(ctx, 0, "SELECT COUNT(*) FROM items WHERE id = ?", 3); err != nil || n != 1 {
			t.Errorf("TxOrDB sees %d of the transaction's own rows (%v), want 1", n, err)
		}
		return nil
	}, txretry.WithRetryOn(func(err error) bool { return errors.Is(err, errUndo) }))
	if err != nil {
		t.Fatal(err)
	}
	if count(2) != 0 || count(3) != 1 {
		t.Errorf("rows 2 and 3: %d and %d, want the rolled-back attempt's 0 and the committed one's 1", count(2), count(3))
	}
	err = o.run(bg, 0, func(ctx context.Context, tx any) error {
		if err := o.exec(ctx, 0, "INSERT INTO items (id) VALUES (?)", 4); err != nil {
			return err
		}
		return errUndo
	})
	if !errors.Is(err, errUndo) || count(4) != 0 {
		t.Errorf("fn failing: %v, %d row(s) of its write through TxOrDB; want errUndo and 0", err, count(4))
	}

	// A call on another handle: TxOrDB of this one is the handle.
	err = o.run(bg, 1, func(ctx context.Context, tx any) error {
		if got := o.same(ctx, 0); got != o.handle(0) {
			t.Errorf("in a call on another handle: %T, want the handle", got)
		}
		if got := o.same(ctx, 1); got != tx {
			t.Errorf("in the call on the other handle, for it: %T, want its tx", got)
		}
		if err := o.exec(ctx, 0, "INSERT INTO items (id) VALUES (?)", 5); err != nil {
			return err
		}
		return errUndo
	})
	if !errors.Is(err, errUndo) || count(5) != 1 {
		t.Errorf("a call on another handle: %v, %d row(s) written on the handle; want errUndo and 1", err, count(5))
	}

	// A call on another handle nested in a call on this one: the outer
	// call's transaction.
	err = o.run(bg, 0, func(ctx context.Context, outer any) error {
		if err := o.exec(ctx, 0, "INSERT INTO items (id) VALUES (?)", 6); err != nil {
			return err
		}
		err := o.run(ctx, 1, func(ctx context.Context, inner any) error {
			if got := o.same(ctx, 0); got != outer {
				t.Errorf("in a nested call on another handle: %T, want the outer call's tx", got)
			}
			if n, err := o.one(ctx, 0, "SELECT COUNT(*) FROM items WHERE id = ?", 6); err != nil || n != 1 {
				t.Errorf("the nested call sees %d of the outer transaction's rows (%v), want 1", n, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return errUndo
	})
	if !errors.Is(err, errUndo) || count(6) != 0 {
		t.Errorf("nested on another handle: %v, %d row(s); want errUndo and 0", err, count(6))
	}

	// After fn returned: the ended transaction, whose statements fail.
	var kept context.Context
	var keptTx any
	if err := o.run(bg, 0, func(ctx context.Context, tx any) error { kept, keptTx = ctx, tx; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := o.same(kept, 0); got != keptTx {
		t.Errorf("after fn returned: %T, want the ended tx", got)
	}
	if err := o.exec(kept, 0, "INSERT INTO items (id) VALUES (?)", 7); !errors.Is(err, o.done) || count(7) != 0 {
		t.Errorf("a write after fn returned: %v, %d row(s); want %v and 0", err, count(7), o.done)
	}
}

// TestNestedCallJoinsAcrossHandles: every library's call on handle 0, then
// one on handle 1 inside it, then one on handle 0 again inside that: the
// third joins the first (the transaction TxOrDB gives there) instead of
// beginning a second transaction on handle 0, which on a pool of one
// connection would wait for that connection until the deadline, and on a
// larger one could wait on the first transaction's locks, a wait no
// database detects. The third call's write is the first's: seen by it,
// rolled back with it.
func TestNestedCallJoinsAcrossHandles(t *testing.T) { forEachOrdb(t, testNestedJoin) }

func testNestedJoin(t *testing.T, o *ordb) {
	bg := t.Context()
	errUndo := errors.New("undo")
	if err := o.exec(bg, 0, "CREATE TABLE items (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if o.oneConn != nil {
		o.oneConn(0)
	}
	// Bounds a wait for handle 0's only connection, were the third call
	// to begin a transaction of its own.
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	err := o.run(ctx, 0, func(ctx context.Context, outer any) error {
		err := o.run(ctx, 1, func(ctx context.Context, _ any) error {
			return o.run(ctx, 0, func(ctx context.Context, inner any) error {
				if inner != outer {
					t.Errorf("the third call got %T %p, want the first call's transaction", inner, inner)
				}
				return o.exec(ctx, 0, "INSERT INTO items (id) VALUES (?)", 1)
			})
		})
		if err != nil {
			return err
		}
		if n, err := o.one(ctx, 0, "SELECT COUNT(*) FROM items WHERE id = ?", 1); err != nil || n != 1 {
			t.Errorf("the first call sees %d of the third call's rows (%v), want 1", n, err)
		}
		return errUndo
	})
	if !errors.Is(err, errUndo) {
		t.Fatalf("err = %v, want the first call's own error", err)
	}
	if n, err := o.one(bg, 0, "SELECT COUNT(*) FROM items WHERE id = ?", 1); err != nil || n != 0 {
		t.Errorf("%d row(s) of the third call's write after the first rolled back (%v), want 0", n, err)
	}
}
