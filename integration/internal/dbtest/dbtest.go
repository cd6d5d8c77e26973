package dbtest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Environment variables read by this package.
const (
	envPGDSN       = "TXRETRY_PG_DSN"
	envMySQLDSN    = "TXRETRY_MYSQL_DSN"
	envPGImage     = "TXRETRY_PG_IMAGE"
	envMySQLImage  = "TXRETRY_MYSQL_IMAGE"
	envMySQLFlavor = "TXRETRY_MYSQL_FLAVOR"
	envCI          = "CI"
)

// Timeouts of the steps that talk to a server or to Docker.
const (
	// pingTimeout bounds the reachability check of a server.
	pingTimeout = 10 * time.Second
	// dockerTimeout bounds the check that a Docker engine answers.
	dockerTimeout = 10 * time.Second
	// startTimeout bounds starting one container, image pull included.
	startTimeout = 3 * time.Minute
	// setupTimeout bounds creating one per-test database.
	setupTimeout = 30 * time.Second
	// cleanupTimeout bounds dropping one per-test database.
	cleanupTimeout = 30 * time.Second
)

// Servers of this test binary, each resolved once on first use.
var (
	pgServer    = &server{backend: postgresBackend}
	mysqlServer = &server{backend: mysqlBackend}
)

// server caches the resolution of one backend for the whole test binary.
type server struct {
	backend backend
	once    sync.Once
	res     result
}

// get resolves the server on first use and returns the result, or skips or
// fails t when the server is unavailable.
func (s *server) get(t testing.TB) *result {
	t.Helper()
	s.once.Do(func() {
		s.res = s.backend.resolve(os.Getenv, dockerAvailable)
	})
	if s.res.err != nil {
		ci := ciEnabled(os.Getenv)
		switch missing(ci, s.res.configured) {
		case actFail:
			note := ""
			if ci && !s.res.configured {
				note = fmt.Sprintf(" (%s=true: failing instead of skipping)", envCI)
			}
			t.Fatalf("dbtest: %v%s", s.res.err, note)
		case actSkip:
			t.Skipf("dbtest: %v", s.res.err)
		}
	}
	return &s.res
}

// action is what a test does when a server it needs is unavailable.
type action int

const (
	// actSkip skips the test.
	actSkip action = iota
	// actFail fails the test.
	actFail
)

// missing decides what a test does when its server is unavailable. Under CI
// the test fails, since skipped integration tests would make a green run
// meaningless. An explicitly configured DSN that does not work is a broken
// configuration and fails everywhere.
func missing(ci, configured bool) action {
	if ci || configured {
		return actFail
	}
	return actSkip
}

// ciEnabled reports whether the CI variable holds a true value ("true", "1",
// ...), as CI services set it.
func ciEnabled(getenv func(string) string) bool {
	ci, err := strconv.ParseBool(getenv(envCI))
	return err == nil && ci
}

// Postgres returns a pgx-style URL DSN of a fresh, empty PostgreSQL database
// created for this test and dropped (WITH (FORCE)) at t.Cleanup. If
// TXRETRY_PG_DSN is in keyword/value form, the returned DSN is in that form
// too.
func Postgres(t testing.TB) string {
	t.Helper()
	return newDatabase(t, pgServer.get(t))
}

// MySQL returns a go-sql-driver DSN (with parseTime=true,
// multiStatements=false) of a fresh database for this test, dropped at
// cleanup. The database uses the utf8mb4 character set.
func MySQL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, mysqlServer.get(t))
}

// MySQLFlavor reports the MySQL-family server the tests run against, as
// "mysql <version>" or "mariadb <version>" (for example
// "mariadb 10.11.6-MariaDB-0+deb12u1"), for test names and logs.
func MySQLFlavor(t testing.TB) string {
	t.Helper()
	r := mysqlServer.get(t)
	return r.info.flavor + " " + r.info.version
}

// PostgresAdmin returns the server-level PostgreSQL DSN, for tests that need
// a second connection with the rights to, for example, call
// pg_terminate_backend. It connects to the database named in
// TXRETRY_PG_DSN (or "postgres" in a container), never to a per-test one.
func PostgresAdmin(t testing.TB) string {
	t.Helper()
	return pgServer.get(t).admin
}

// MySQLAdmin returns the server-level MySQL DSN, for tests that need a second
// connection with the rights to, for example, KILL another session.
func MySQLAdmin(t testing.TB) string {
	t.Helper()
	return mysqlServer.get(t).admin
}

// Main wraps testing.M: it runs the tests, then terminates any container
// this package started, and exits with the tests' status (or 1 if the
// tests passed but a container could not be terminated). Use it as:
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
func Main(m *testing.M) {
	os.Exit(run(m))
}

// runner is the part of testing.M that Main needs.
type runner interface {
	Run() int
}

// run runs the tests and then terminates the containers.
func run(m runner) int {
	code := m.Run()
	if err := terminateContainers(); err != nil {
		fmt.Fprintf(os.Stderr, "dbtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// newDatabase creates a per-test database on the server of r and registers
// its drop with t.Cleanup.
func newDatabase(t testing.TB, r *result) string {
	t.Helper()
	b := r.backend
	name := databaseName(t.Name(), b.maxIdent, randomSuffix())
	dsn, err := b.databaseDSN(r.admin, name)
	if err != nil {
		t.Fatalf("dbtest: %s DSN for database %s: %v", b.name, name, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := b.create(ctx, r.admin, name); err != nil {
		t.Fatalf("dbtest: create %s database %s: %v", b.name, name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := b.drop(ctx, r.admin, name, r.info); err != nil {
			t.Errorf("dbtest: drop %s database %s: %v", b.name, name, err)
		}
	})
	t.Logf("dbtest: database %s on %s %s (%s)", name, r.info.flavor, r.info.version, r.source)
	return dsn
}
