package dbservertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txretry/txretry/integration/dbserver"
)

// These tests need servers: from TXRETRY_PG_DSN / TXRETRY_MYSQL_DSN, Docker
// or the installed binaries; otherwise they skip (or fail under CI=true).

func TestMain(m *testing.M) { Main(m) }

// Identifier limits of the servers, in bytes.
const (
	pgMaxIdent    = 63
	mysqlMaxIdent = 64
)

var validName = regexp.MustCompile(`^txr_[a-z0-9_]+_[0-9a-f]{8}$`)

// serverKind describes one server for the table-driven tests below.
type serverKind struct {
	name     string
	driver   string
	maxIdent int
	// fresh returns a per-test DSN, admin the server-level one.
	fresh, admin func(testing.TB) string
	// dbName extracts the database name from a per-test DSN.
	dbName func(t testing.TB, dsn string) string
	// exists is the query that counts databases named $1 / ?.
	exists string
	// leaveLocked starts a transaction holding a lock on table t and
	// returns without ending it.
	lockStmt string
}

var kinds = []serverKind{
	{
		name:     "postgres",
		driver:   "pgx",
		maxIdent: pgMaxIdent,
		fresh:    Postgres,
		admin:    PostgresAdmin,
		dbName: func(t testing.TB, dsn string) string {
			cfg, err := pgconn.ParseConfig(dsn)
			if err != nil {
				t.Fatalf("parse DSN: %v", err)
			}
			return cfg.Database
		},
		exists:   "SELECT count(*) FROM pg_database WHERE datname = $1",
		lockStmt: "LOCK TABLE t IN ACCESS EXCLUSIVE MODE",
	},
	{
		name:     "mysql",
		driver:   "mysql",
		maxIdent: mysqlMaxIdent,
		fresh:    MySQL,
		admin:    MySQLAdmin,
		dbName: func(t testing.TB, dsn string) string {
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				t.Fatalf("parse DSN: %v", err)
			}
			return cfg.DBName
		},
		exists:   "SELECT count(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
		lockStmt: "SELECT * FROM t FOR UPDATE",
	},
}

// openDB opens dsn and closes the pool at the end of t.
func openDB(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return db
}

func exec(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// countDatabases returns how many databases named name the server has.
func countDatabases(t testing.TB, k serverKind, name string) int {
	t.Helper()
	db := openDB(t, k.driver, k.admin(t))
	var n int
	if err := db.QueryRowContext(context.Background(), k.exists, name).Scan(&n); err != nil {
		t.Fatalf("count databases: %v", err)
	}
	return n
}

func TestFreshDatabaseWorks(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			dsn := k.fresh(t)
			name := k.dbName(t, dsn)
			if !validName.MatchString(name) || len(name) > k.maxIdent {
				t.Errorf("database name %q is not a valid per-test name", name)
			}
			db := openDB(t, k.driver, dsn)
			exec(t, db, "CREATE TABLE t (id INT PRIMARY KEY, v TEXT)")
			exec(t, db, "INSERT INTO t (id, v) VALUES (1, 'one'), (2, 'two')")
			var n int
			if err := db.QueryRow("SELECT count(*) FROM t").Scan(&n); err != nil || n != 2 {
				t.Errorf("count = %d, %v; want 2", n, err)
			}
			if got := countDatabases(t, k, name); got != 1 {
				t.Errorf("admin connection sees %d databases named %s, want 1", got, name)
			}
		})
	}
}

// TestDatabaseDroppedAfterTest leaves a connection with an open, locking
// transaction behind in a subtest and checks that its database is gone once
// the subtest has ended.
func TestDatabaseDroppedAfterTest(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			k.admin(t) // skip here, not in the subtest, without a server
			var name string
			// leaked outlives the subtest on purpose; it is closed only
			// at the end of the parent.
			var (
				leaked   *sql.DB
				leakedTx *sql.Tx
			)
			t.Run("use", func(t *testing.T) {
				dsn := k.fresh(t)
				name = k.dbName(t, dsn)
				db, err := sql.Open(k.driver, dsn)
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				leaked = db
				exec(t, db, "CREATE TABLE t (id INT PRIMARY KEY)")
				exec(t, db, "INSERT INTO t (id) VALUES (1)")
				tx, err := db.Begin()
				if err != nil {
					t.Fatalf("begin: %v", err)
				}
				leakedTx = tx
				if _, err := tx.Exec(k.lockStmt); err != nil {
					t.Fatalf("lock: %v", err)
				}
				// tx is neither committed nor rolled back.
			})
			t.Cleanup(func() {
				// The drop ended the connection, so both only release
				// client resources and may report the lost connection.
				if leakedTx != nil {
					_ = leakedTx.Rollback()
				}
				if leaked != nil {
					_ = leaked.Close()
				}
			})
			if name == "" {
				t.Fatal("subtest did not create a database")
			}
			if got := countDatabases(t, k, name); got != 0 {
				t.Errorf("database %s still exists after its test", name)
			}
		})
	}
}

// TestParallelTestsAreIsolated runs parallel tests that create the same
// table name; each must see only its own rows.
func TestParallelTestsAreIsolated(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for i := range 4 {
				t.Run("worker", func(t *testing.T) {
					t.Parallel()
					db := openDB(t, k.driver, k.fresh(t))
					exec(t, db, "CREATE TABLE t (id INT PRIMARY KEY)")
					for j := range i + 1 {
						exec(t, db, "INSERT INTO t (id) VALUES ("+strconv.Itoa(j)+")")
					}
					var n int
					if err := db.QueryRow("SELECT count(*) FROM t").Scan(&n); err != nil || n != i+1 {
						t.Errorf("count = %d, %v; want %d", n, err, i+1)
					}
				})
			}
		})
	}
}

// TestLongTestName checks that a test name longer than the identifier limit
// still yields a database the server accepts.
func TestLongTestName(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Run(strings.Repeat("Long_Subtest-Name/", 8), func(t *testing.T) {
				dsn := k.fresh(t)
				name := k.dbName(t, dsn)
				if len(name) > k.maxIdent || !validName.MatchString(name) {
					t.Errorf("database name %q (%d bytes) is invalid", name, len(name))
				}
				db := openDB(t, k.driver, dsn)
				exec(t, db, "CREATE TABLE t (id INT)")
			})
		})
	}
}

func TestMySQLDSNOptions(t *testing.T) {
	db := openDB(t, "mysql", MySQL(t))
	var now time.Time
	if err := db.QueryRow("SELECT NOW()").Scan(&now); err != nil {
		t.Errorf("scan DATETIME into time.Time (parseTime=true): %v", err)
	}
	_, err := db.Exec("SELECT 1; SELECT 2")
	if me, ok := errors.AsType[*mysql.MySQLError](err); !ok || me.Number != 1064 {
		t.Errorf("multi-statement query: err = %v, want syntax error 1064 (multiStatements=false)", err)
	}
	var charset string
	if err := db.QueryRow("SELECT @@character_set_database").Scan(&charset); err != nil || charset != "utf8mb4" {
		t.Errorf("character set = %q, %v; want utf8mb4", charset, err)
	}
}

func TestMySQLFlavor(t *testing.T) {
	got := MySQLFlavor(t)
	db := openDB(t, "mysql", MySQLAdmin(t))
	var version string
	if err := db.QueryRow("SELECT VERSION()").Scan(&version); err != nil {
		t.Fatalf("version: %v", err)
	}
	want := "mysql " + version
	if strings.Contains(version, "MariaDB") {
		want = "mariadb " + version
	}
	if got != want {
		t.Errorf("MySQLFlavor() = %q, want %q", got, want)
	}
}

// TestAdminCanEndSessions checks that the admin DSNs can end another
// session, which is what tests of lost connections use them for.
func TestAdminCanEndSessions(t *testing.T) {
	tests := []struct {
		kind               serverKind
		sessionID, killSQL string
	}{
		// The id is written into the statement, a number the server gave:
		// MySQL refuses a placeholder in KILL (6413, "Dynamic parameters
		// can only be used in DML statements"), MariaDB accepts one.
		{kinds[0], "SELECT pg_backend_pid()", "SELECT pg_terminate_backend(%d)"},
		{kinds[1], "SELECT CONNECTION_ID()", "KILL %d"},
	}
	for _, tt := range tests {
		t.Run(tt.kind.name, func(t *testing.T) {
			ctx := context.Background()
			victim := openDB(t, tt.kind.driver, tt.kind.fresh(t))
			conn, err := victim.Conn(ctx)
			if err != nil {
				t.Fatalf("conn: %v", err)
			}
			t.Cleanup(func() { _ = conn.Close() }) // the connection is dead by then
			var id int64
			if err := conn.QueryRowContext(ctx, tt.sessionID).Scan(&id); err != nil {
				t.Fatalf("session id: %v", err)
			}
			admin := openDB(t, tt.kind.driver, tt.kind.admin(t))
			if _, err := admin.ExecContext(ctx, fmt.Sprintf(tt.killSQL, id)); err != nil {
				t.Fatalf("end session: %v", err)
			}
			if err := conn.PingContext(ctx); err == nil {
				t.Error("ended session still answers")
			}
		})
	}
}

// TestNamespace checks, on each reachable server, that a namespace's DSN
// resolves unqualified table names in the namespace, and that Drop removes
// it.
func TestNamespace(t *testing.T) {
	for _, e := range []dbserver.Engine{dbserver.Postgres, dbserver.MySQL} {
		t.Run(e.String(), func(t *testing.T) {
			srv := Server(t, e)
			ns := Namespace(t, srv, "txretry_test_dbserver")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			db, err := sql.Open(e.Driver(), ns.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			table := ns.Table("probe")
			if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (id INT PRIMARY KEY)"); err != nil {
				t.Fatalf("create table in %s: %v", ns.Where, err)
			}
			if _, err := db.ExecContext(ctx, e.Rebind("INSERT INTO "+table+" (id) VALUES (?)"), 7); err != nil {
				t.Fatal(err)
			}

			// The table is in the namespace, not in the DSN's own database.
			var where string
			query := "SELECT table_schema FROM information_schema.tables WHERE table_name = ?"
			if err := db.QueryRowContext(ctx, e.Rebind(query), table).Scan(&where); err != nil {
				t.Fatal(err)
			}
			if want := ns.Name; ns.Prefix == "" && where != want {
				t.Errorf("table is in %q, want %q", where, want)
			}

			if err := ns.Drop(ctx); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := db.QueryRowContext(ctx, e.Rebind(
				"SELECT COUNT(*) FROM information_schema.tables WHERE table_name = ?"), table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("after Drop, %d tables named %s remain", n, table)
			}
			t.Log(srv, ns.Where, fmt.Sprint(srv.Flavor()))
		})
	}
}

// fakeTB records Skipf and Fatalf instead of ending the test.
type fakeTB struct {
	skipped, failed string
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Skipf(format string, a ...any)  { f.skipped = fmt.Sprintf(format, a...) }
func (f *fakeTB) Fatalf(format string, a ...any) { f.failed = fmt.Sprintf(format, a...) }

// TestUnavailable checks that a missing server skips a test with the
// reason outside CI and fails it under CI=true, and that a broken
// configuration fails it everywhere.
func TestUnavailable(t *testing.T) {
	absent := &dbserver.UnavailableError{Engine: dbserver.Postgres, Err: errors.New("TXRETRY_PG_DSN is not set; ...")}
	broken := &dbserver.UnavailableError{Engine: dbserver.Postgres, Configured: true,
		Err: errors.New("TXRETRY_PG_DSN is set but its server does not answer")}
	tests := []struct {
		name     string
		ci       string
		err      error
		wantSkip bool
		wantIn   string
	}{
		{"absent", "", absent, true, "TXRETRY_PG_DSN is not set"},
		{"absent, CI=false", "false", absent, true, "TXRETRY_PG_DSN is not set"},
		{"absent, CI=true", "true", absent, false, "CI=true: failing instead of skipping"},
		{"absent, CI=1", "1", absent, false, "CI=true: failing instead of skipping"},
		{"DSN set but dead", "", broken, false, "does not answer"},
		{"DSN set but dead, CI=true", "true", broken, false, "does not answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			var f fakeTB
			unavailable(&f, tt.err)
			msg := f.failed
			if tt.wantSkip {
				msg = f.skipped
			}
			if (f.skipped != "") != tt.wantSkip || (f.failed != "") == tt.wantSkip {
				t.Fatalf("skipped=%q failed=%q, want skip=%v", f.skipped, f.failed, tt.wantSkip)
			}
			if !strings.Contains(msg, tt.wantIn) {
				t.Errorf("message %q does not contain %q", msg, tt.wantIn)
			}
		})
	}
}

// TestEnvServer checks that a program run by a test finds the test's
// server through the DSN variable.
func TestEnvServer(t *testing.T) {
	srv := EnvServer(t, dbserver.Postgres)
	if got := os.Getenv(dbserver.EnvPGDSN); got != srv.DSN {
		t.Errorf("%s is not the server's DSN", dbserver.EnvPGDSN)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	found, err := dbserver.Find(ctx, dbserver.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	defer found.Close()
	if found.Source != dbserver.EnvPGDSN || found.Version != srv.Version {
		t.Errorf("the program found %v, want the test's %v through %s", found, srv, dbserver.EnvPGDSN)
	}
}
