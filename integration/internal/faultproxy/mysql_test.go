package faultproxy

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

func init() {
	// go-sql-driver logs every broken connection; the tests break many.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
}

// myEnv is a MySQL/MariaDB server reached directly, with a fresh table.
type myEnv struct {
	cfg    *mysql.Config
	direct *sql.DB
	table  string
}

func newMyEnv(t *testing.T) *myEnv {
	t.Helper()
	dsn := dsnFromEnv(t, envMySQLDSN, "root@tcp(127.0.0.1:3306)/test")
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("%s: %v", envMySQLDSN, err)
	}
	if cfg.Net != "tcp" {
		t.Fatalf("%s must use tcp, not %q", envMySQLDSN, cfg.Net)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("%s: %v", envMySQLDSN, err)
	}
	direct := sql.OpenDB(conn)
	t.Cleanup(func() { _ = direct.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := direct.PingContext(ctx); err != nil {
		unavailable(t, "MySQL from "+envMySQLDSN+" is unreachable: "+err.Error())
	}
	e := &myEnv{cfg: cfg, direct: direct, table: tableName("my")}
	if _, err := direct.ExecContext(ctx, "create table "+e.table+" (id bigint primary key) engine=InnoDB"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := direct.ExecContext(ctx, "drop table "+e.table); err != nil {
			t.Errorf("drop table: %v", err)
		}
	})
	return e
}

// proxyDB opens a database/sql pool reaching the server through p; a
// positive readTimeout bounds every read.
func (e *myEnv) proxyDB(t *testing.T, p *Proxy, readTimeout time.Duration) *sql.DB {
	t.Helper()
	cfg := e.cfg.Clone()
	cfg.Addr = p.Addr()
	cfg.ReadTimeout = readTimeout
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func (e *myEnv) exists(t *testing.T, id int64) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ok bool
	err := e.direct.QueryRowContext(ctx, "select exists (select 1 from "+e.table+" where id = ?)", id).Scan(&ok)
	if err != nil {
		t.Fatalf("direct lookup: %v", err)
	}
	return ok
}

func TestMySQLFaults(t *testing.T) {
	e := newMyEnv(t)
	p := startProxy(t, e.cfg.Addr, MySQL)
	insertSQL := "insert into " + e.table + " (id) values (?)"
	cl := sqlClient(e.proxyDB(t, p, 0), insertSQL, e.exists, classifyMySQL)
	// go-sql-driver ignores the context during COMMIT: bound it with a
	// read timeout on a second pool instead.
	stall := sqlClient(e.proxyDB(t, p, stallTimeout), insertSQL, e.exists, classifyMySQL)
	runFaultCases(t, p, client{
		commitRow: func(t *testing.T, id int64, timeout time.Duration) error {
			if timeout > 0 {
				return stall.commitRow(t, id, 0)
			}
			return cl.commitRow(t, id, 0)
		},
		exists:   e.exists,
		classify: classifyMySQL,
	})
}

// classifyMySQL reports how go-sql-driver's sentinels see a commit error.
func classifyMySQL(err error) string {
	var myErr *mysql.MySQLError
	return fmt.Sprintf("Is(mysql.ErrInvalidConn)=%v Is(driver.ErrBadConn)=%v As(*mysql.MySQLError)=%v",
		errors.Is(err, mysql.ErrInvalidConn), errors.Is(err, driver.ErrBadConn), errors.As(err, &myErr))
}
