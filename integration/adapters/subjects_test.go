package adapters

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log"
	"net"
	"strconv"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/mysqldialect"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"
	"go.uber.org/goleak"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/bunretry"
	"github.com/txretry/txretry/txretry/gormretry"
	"github.com/txretry/txretry/txretry/sqlxretry"
)

func TestMain(m *testing.M) {
	// go-sql-driver logs every broken connection; the faults are on purpose.
	_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
	dbservertest.Main(m, gormLRU)
}

// txq is what the tests do inside fn, in each library's own terms:
// statements with ? placeholders.
type txq interface {
	exec(ctx context.Context, query string, args ...any) error
	// one scans a single integer.
	one(ctx context.Context, query string, args ...any) (int64, error)
	// savepoint runs f in the library's nested transaction (a savepoint);
	// nil where the library has none.
	savepoint(ctx context.Context, f func(ctx context.Context, q txq) error) error
	// nested calls the library's RunInTx again, with ctx.
	nested(ctx context.Context, f func(ctx context.Context, q txq) error) error
}

// subject is one library on one server: its RunInTx on a pool that goes
// through a fault proxy, and a direct pool to check what the server has.
type subject struct {
	name   string // "gorm/postgres"
	pg     bool
	run    func(ctx context.Context, f func(ctx context.Context, q txq) error, opts ...txretry.Option) error
	pool   *sql.DB // the proxied pool under the library
	direct *sql.DB
	proxy  *faultproxy.Proxy
}

// count runs a COUNT(*)-like query on the direct pool.
func (s *subject) count(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	if s.pg {
		query = rebindPG(query)
	}
	var n int64
	if err := s.direct.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (s *subject) setup(t *testing.T, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := s.direct.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func rebindPG(q string) string { return sqlx.Rebind(sqlx.DOLLAR, q) }

type library struct {
	name string
	// open wraps the proxied pool; the run it returns is the library's
	// RunInTx.
	open func(t *testing.T, pool *sql.DB, pg bool) func(ctx context.Context, f func(ctx context.Context, q txq) error, opts ...txretry.Option) error
	// pgdriver: PostgreSQL only, through bun's own driver instead of
	// pgx's stdlib.
	pgdriver bool
}

var libraries = []library{
	{name: "gorm", open: openGORM(false)},
	{name: "gorm-prepared", open: openGORM(true)},
	{name: "bun", open: openBun},
	{name: "bun-pgdriver", open: openBun, pgdriver: true},
	{name: "sqlx", open: openSQLX},
}

// gormLRU is the expiry goroutine of GORM's prepared-statement cache,
// which GORM never stops (gorm/internal/lru says so): GORM's, not the
// adapter's.
var gormLRU = goleak.IgnoreTopFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1")

// forEach runs test for each library on each server, each in a fresh
// database, and checks that no connection is in use afterwards and no
// goroutine is left once the pools and the proxy are closed.
func forEach(t *testing.T, test func(t *testing.T, s *subject)) {
	for _, lib := range libraries {
		for _, pg := range []bool{true, false} {
			if lib.pgdriver && !pg {
				continue // a PostgreSQL driver
			}
			engine := "mysql" // MySQL or MariaDB, whichever TXRETRY_MYSQL_DSN names
			if pg {
				engine = "postgres"
			}
			t.Run(lib.name+"/"+engine, func(t *testing.T) {
				t.Cleanup(func() { goleak.VerifyNone(t, gormLRU) }) // first, so it runs last
				s := &subject{name: lib.name + "/" + engine, pg: pg}
				if pg {
					s.direct, s.pool, s.proxy = pgPools(t, lib.pgdriver)
				} else {
					s.direct, s.pool, s.proxy = mysqlPools(t)
				}
				s.run = lib.open(t, s.pool, pg)
				test(t, s)
				if n := s.pool.Stats().InUse; n != 0 {
					t.Errorf("%d connection(s) still in use", n)
				}
			})
		}
	}
}

func pgPools(t *testing.T, viaPgdriver bool) (direct, proxied *sql.DB, proxy *faultproxy.Proxy) {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbservertest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	direct = stdlib.OpenDB(*cfg)
	t.Cleanup(func() { direct.Close() })
	proxy = faultproxy.StartPartition(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), faultproxy.Postgres)
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, _ := strconv.Atoi(port)
	pc := cfg.Copy()
	pc.Host, pc.Port, pc.Fallbacks = host, uint16(p), nil
	if viaPgdriver {
		proxied = sql.OpenDB(pgdriver.NewConnector(pgdriver.WithAddr(proxy.Addr()), pgdriver.WithInsecure(true),
			pgdriver.WithUser(cfg.User), pgdriver.WithPassword(cfg.Password), pgdriver.WithDatabase(cfg.Database)))
	} else {
		proxied = stdlib.OpenDB(*pc)
	}
	t.Cleanup(func() { proxied.Close() })
	proxied.SetMaxOpenConns(10)
	return direct, proxied, proxy
}

func mysqlPools(t *testing.T) (direct, proxied *sql.DB, proxy *faultproxy.Proxy) {
	t.Helper()
	cfg, err := gomysql.ParseDSN(dbservertest.MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	if direct, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	proxy = faultproxy.StartPartition(t, cfg.Addr, faultproxy.MySQL)
	pc := cfg.Clone()
	pc.Addr = proxy.Addr()
	if proxied, err = sql.Open("mysql", pc.FormatDSN()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxied.Close() })
	proxied.SetMaxOpenConns(10)
	return direct, proxied, proxy
}

// GORM, with TranslateError on, so that the tests see that the retried
// classes reach the classifier through GORM's translation; prepared: with
// GORM's prepared-statement cache (PrepareStmt).
func openGORM(prepared bool) func(t *testing.T, pool *sql.DB, pg bool) func(context.Context, func(context.Context, txq) error, ...txretry.Option) error {
	return func(t *testing.T, pool *sql.DB, pg bool) func(context.Context, func(context.Context, txq) error, ...txretry.Option) error {
		t.Helper()
		var dialector gorm.Dialector = mysql.New(mysql.Config{Conn: pool})
		if pg {
			dialector = postgres.New(postgres.Config{Conn: pool})
		}
		db, err := gorm.Open(dialector, &gorm.Config{TranslateError: true, PrepareStmt: prepared, Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		return gormRun(db)
	}
}

func gormRun(db *gorm.DB) func(context.Context, func(context.Context, txq) error, ...txretry.Option) error {
	var run func(context.Context, func(context.Context, txq) error, ...txretry.Option) error
	run = func(ctx context.Context, f func(context.Context, txq) error, opts ...txretry.Option) error {
		// A new session for every call: the handle is the pool all the same.
		return gormretry.RunInTx(ctx, db.Session(&gorm.Session{}), func(ctx context.Context, tx *gorm.DB) error {
			return f(ctx, gormQ{tx, run})
		}, opts...)
	}
	return run
}

type gormQ struct {
	tx  *gorm.DB
	run func(context.Context, func(context.Context, txq) error, ...txretry.Option) error
}

func (q gormQ) exec(ctx context.Context, query string, args ...any) error {
	return q.tx.WithContext(ctx).Exec(query, args...).Error
}

func (q gormQ) one(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	return n, q.tx.WithContext(ctx).Raw(query, args...).Scan(&n).Error
}

func (q gormQ) savepoint(ctx context.Context, f func(context.Context, txq) error) error {
	return q.tx.Transaction(func(tx *gorm.DB) error { return f(ctx, gormQ{tx, q.run}) })
}

func (q gormQ) nested(ctx context.Context, f func(context.Context, txq) error) error {
	// Given fn's own tx: it joins all the same.
	return gormretry.RunInTx(ctx, q.tx, func(ctx context.Context, tx *gorm.DB) error { return f(ctx, gormQ{tx, q.run}) })
}

func openBun(t *testing.T, pool *sql.DB, pg bool) func(context.Context, func(context.Context, txq) error, ...txretry.Option) error {
	t.Helper()
	var db *bun.DB
	if pg {
		db = bun.NewDB(pool, pgdialect.New())
	} else {
		db = bun.NewDB(pool, mysqldialect.New())
	}
	return func(ctx context.Context, f func(context.Context, txq) error, opts ...txretry.Option) error {
		return bunretry.RunInTx(ctx, db, func(ctx context.Context, tx bun.Tx) error {
			return f(ctx, bunQ{db, tx})
		}, opts...)
	}
}

type bunQ struct {
	db *bun.DB
	tx bun.Tx
}

func (q bunQ) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.NewRaw(query, args...).Exec(ctx)
	return err
}

func (q bunQ) one(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	return n, q.tx.NewRaw(query, args...).Scan(ctx, &n)
}

func (q bunQ) savepoint(ctx context.Context, f func(context.Context, txq) error) error {
	return q.tx.RunInTx(ctx, nil, func(ctx context.Context, sp bun.Tx) error { return f(ctx, bunQ{q.db, sp}) })
}

func (q bunQ) nested(ctx context.Context, f func(context.Context, txq) error) error {
	// A clone of the *bun.DB: the handle is the pool all the same.
	return bunretry.RunInTx(ctx, q.db.WithNamedArg("unused", 1), func(ctx context.Context, tx bun.Tx) error { return f(ctx, bunQ{q.db, tx}) })
}

func openSQLX(t *testing.T, pool *sql.DB, pg bool) func(context.Context, func(context.Context, txq) error, ...txretry.Option) error {
	t.Helper()
	driver := "mysql"
	if pg {
		driver = "pgx"
	}
	db := sqlx.NewDb(pool, driver)
	return func(ctx context.Context, f func(context.Context, txq) error, opts ...txretry.Option) error {
		return sqlxretry.RunInTx(ctx, db, func(ctx context.Context, tx *sqlx.Tx) error {
			return f(ctx, sqlxQ{db, tx})
		}, opts...)
	}
}

type sqlxQ struct {
	db *sqlx.DB
	tx *sqlx.Tx
}

func (q sqlxQ) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.ExecContext(ctx, q.tx.Rebind(query), args...)
	return err
}

func (q sqlxQ) one(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	return n, q.tx.GetContext(ctx, &n, q.tx.Rebind(query), args...)
}

// savepoint: sqlx has no nested transaction; a SAVEPOINT by hand.
func (q sqlxQ) savepoint(ctx context.Context, f func(context.Context, txq) error) error {
	if err := q.exec(ctx, "SAVEPOINT sp"); err != nil {
		return err
	}
	if err := f(ctx, q); err != nil {
		// MariaDB has rolled the whole transaction back after a
		// deadlock, savepoint included: both errors, so that the
		// deadlock is still seen.
		if rerr := q.exec(ctx, "ROLLBACK TO SAVEPOINT sp"); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	return q.exec(ctx, "RELEASE SAVEPOINT sp")
}

func (q sqlxQ) nested(ctx context.Context, f func(context.Context, txq) error) error {
	return sqlxretry.RunInTx(ctx, q.db, func(ctx context.Context, tx *sqlx.Tx) error { return f(ctx, sqlxQ{q.db, tx}) })
}
