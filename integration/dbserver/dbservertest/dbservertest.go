// Package dbservertest gives tests their database servers, through package
// dbserver, and a database or namespace of their own on them. It is not a
// public API.
//
// A test whose server is unavailable is skipped with a message that says
// what to do, or fails when CI is true (a CI run that silently skips every
// database test proves nothing) or when the DSN variable is set but its
// server does not answer.
//
// Each server is resolved once per test binary; run the tests through
// integration/cmd/withdb to share one server per engine between all the
// binaries of a go test run. Use the package with:
//
//	func TestMain(m *testing.M) { dbservertest.Main(m) }
//
// which stops the servers the binary started, and checks for leaked
// goroutines. All functions that take a testing.TB may skip or fail the
// test, so they must be called from the test's goroutine.
package dbservertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/txretry/txretry/integration/dbserver"
)

// cleanupTimeout bounds creating or dropping a test's database or
// namespace.
const cleanupTimeout = 30 * time.Second

// servers holds the server of each engine, resolved once per test binary.
var servers struct {
	mu   sync.Mutex
	byE  map[dbserver.Engine]*lookup
	used []*dbserver.Server
}

// lookup is the cached result of dbserver.Find for one engine.
type lookup struct {
	once sync.Once
	srv  *dbserver.Server
	err  error
}

// find is dbserver.Find; tests replace it.
var find = dbserver.Find

// Server returns the server of engine e, resolved on first use and shared by
// the whole test binary. When none is available it skips t, or fails it
// under CI=true or when e's DSN variable is set but does not work.
func Server(t testing.TB, e dbserver.Engine) *dbserver.Server {
	t.Helper()
	servers.mu.Lock()
	if servers.byE == nil {
		servers.byE = make(map[dbserver.Engine]*lookup)
	}
	l := servers.byE[e]
	if l == nil {
		l = &lookup{}
		servers.byE[e] = l
	}
	servers.mu.Unlock()

	l.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dbserver.FindTimeout)
		defer cancel()
		l.srv, l.err = find(ctx, e)
		if l.srv != nil {
			servers.mu.Lock()
			servers.used = append(servers.used, l.srv)
			servers.mu.Unlock()
		}
	})
	if l.err != nil {
		unavailable(t, l.err)
	}
	return l.srv
}

// tb is the part of testing.TB that unavailable uses.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// unavailable skips t for err, or fails it under CI=true or when err is a
// broken configuration.
func unavailable(t tb, err error) {
	t.Helper()
	ue, _ := errors.AsType[*dbserver.UnavailableError](err)
	switch {
	case ue != nil && ue.Configured:
		t.Fatalf("%v", err)
	case CI():
		t.Fatalf("%v (%s=true: failing instead of skipping)", err, dbserver.EnvCI)
	default:
		t.Skipf("%v", err)
	}
}

// CI reports whether the CI variable holds a true value ("true", "1", ...),
// as CI services set it.
func CI() bool {
	ci, err := strconv.ParseBool(os.Getenv(dbserver.EnvCI))
	return err == nil && ci
}

// EnvServer is Server for a test that runs a program as a user would, the
// program finding its servers itself through e's DSN variable: when the
// server was started here rather than found in the variable, it sets the
// variable to the server's DSN for the test, so that the program uses this
// server instead of starting one of its own. The test must not be
// parallel.
func EnvServer(t testing.TB, e dbserver.Engine) *dbserver.Server {
	t.Helper()
	srv := Server(t, e)
	if srv.Source != e.EnvVar() {
		t.Setenv(e.EnvVar(), srv.DSN)
	}
	return srv
}

// Namespace returns a fresh namespace called name on srv, dropped when t
// ends (also before, in case an earlier run left it behind).
func Namespace(t testing.TB, srv *dbserver.Server, name string) dbserver.Namespace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	ns, err := srv.Namespace(ctx, name)
	if err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
	if err := ns.Drop(ctx); err != nil {
		t.Fatalf("drop leftover namespace %s: %v", name, err)
	}
	if ns, err = srv.Namespace(ctx, name); err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := ns.Drop(ctx); err != nil {
			t.Errorf("drop namespace %s: %v", name, err)
		}
	})
	return ns
}

// Database returns the DSN of a fresh, empty database on the server of e,
// created for t and dropped when t ends (ending the sessions still using
// it). The name is txr_<test name>_<random>; see dbserver.CreateDatabase
// for the DSN's form.
func Database(t testing.TB, e dbserver.Engine) string {
	t.Helper()
	srv := Server(t, e)
	name := dbserver.DatabaseName(e, t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	dsn, err := srv.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatalf("create %s database %s: %v", e, name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := srv.DropDatabase(ctx, name); err != nil {
			t.Errorf("drop %s database %s: %v", e, name, err)
		}
	})
	t.Logf("database %s on %s", name, srv)
	return dsn
}

// Postgres returns a pgx DSN of a fresh PostgreSQL database (Database).
func Postgres(t testing.TB) string {
	t.Helper()
	return Database(t, dbserver.Postgres)
}

// MySQL returns a go-sql-driver DSN (parseTime=true, multiStatements=false)
// of a fresh utf8mb4 MySQL or MariaDB database (Database).
func MySQL(t testing.TB) string {
	t.Helper()
	return Database(t, dbserver.MySQL)
}

// PostgresAdmin returns the server-level PostgreSQL DSN, for tests that
// need a second connection with the rights to, for example, call
// pg_terminate_backend.
func PostgresAdmin(t testing.TB) string {
	t.Helper()
	return Server(t, dbserver.Postgres).DSN
}

// MySQLAdmin returns the server-level MySQL DSN, for tests that need a
// second connection with the rights to, for example, KILL another session.
func MySQLAdmin(t testing.TB) string {
	t.Helper()
	return Server(t, dbserver.MySQL).DSN
}

// MySQLFlavor reports the MySQL-family server the tests run against, as
// "mysql <version>" or "mariadb <version>", for test names and logs.
func MySQLFlavor(t testing.TB) string {
	t.Helper()
	srv := Server(t, dbserver.MySQL)
	return srv.Flavor() + " " + srv.Version
}

// Main runs the tests, stops the servers they started and checks that no
// goroutine was leaked (when no container was started: the Docker client
// keeps goroutines of its own). It exits with the tests' status, or 1 if
// they passed but stopping a server or the leak check failed. opts are
// given to the leak check, for goroutines a library keeps by design.
func Main(m *testing.M, opts ...goleak.Option) {
	os.Exit(run(m, opts...))
}

// run is Main without the exit.
func run(m interface{ Run() int }, opts ...goleak.Option) int {
	code := m.Run()
	servers.mu.Lock()
	used := servers.used
	servers.used, servers.byE = nil, nil
	servers.mu.Unlock()

	containers := false
	var errs []error
	for _, s := range used {
		containers = containers || s.FromContainer()
		errs = append(errs, s.Close())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "dbservertest: %v\n", err)
		code = max(code, 1)
	}
	if code == 0 && !containers {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "dbservertest: %v\n", err)
			code = 1
		}
	}
	return code
}
