package dbtest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/testcontainers/testcontainers-go"
	"go.uber.org/goleak"
)

// mainRunner runs the package's tests through run, as Main does, so that
// goleak checks after the containers are gone.
type mainRunner struct{ m *testing.M }

func (r mainRunner) Run() int { return run(r.m) }

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(mainRunner{m})
}

func TestMissing(t *testing.T) {
	tests := []struct {
		ci, configured bool
		want           action
	}{
		{ci: false, configured: false, want: actSkip},
		{ci: true, configured: false, want: actFail},
		{ci: false, configured: true, want: actFail},
		{ci: true, configured: true, want: actFail},
	}
	for _, tt := range tests {
		if got := missing(tt.ci, tt.configured); got != tt.want {
			t.Errorf("missing(ci=%v, configured=%v) = %v, want %v", tt.ci, tt.configured, got, tt.want)
		}
	}
}

func TestCIEnabled(t *testing.T) {
	tests := []struct {
		value string
		want  bool
	}{
		{"", false},
		{"true", true},
		{"TRUE", true},
		{"1", true},
		{"false", false},
		{"0", false},
		{"yes", false},
	}
	for _, tt := range tests {
		getenv := func(k string) string { return map[string]string{envCI: tt.value}[k] }
		if got := ciEnabled(getenv); got != tt.want {
			t.Errorf("ciEnabled(CI=%q) = %v, want %v", tt.value, got, tt.want)
		}
	}
}

// fakeTB records Skipf and Fatalf instead of ending the test.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Skipf(format string, a ...any)  { f.skipped = fmt.Sprintf(format, a...) }
func (f *fakeTB) Fatalf(format string, a ...any) { f.failed = fmt.Sprintf(format, a...) }

func TestGetSkipsOrFails(t *testing.T) {
	tests := []struct {
		name       string
		ci         string
		configured bool
		wantSkip   bool
		wantInMsg  string
	}{
		{name: "local, absent", ci: "", wantSkip: true, wantInMsg: "set TXRETRY_PG_DSN"},
		{name: "CI, absent", ci: "true", wantInMsg: "CI=true: failing instead of skipping"},
		{name: "local, misconfigured", ci: "", configured: true, wantInMsg: "set TXRETRY_PG_DSN"},
		{name: "CI, misconfigured", ci: "true", configured: true, wantInMsg: "set TXRETRY_PG_DSN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envCI, tt.ci)
			s := &server{res: result{err: errors.New("no PostgreSQL: set TXRETRY_PG_DSN=..."), configured: tt.configured}}
			s.once.Do(func() {})
			var f fakeTB
			s.get(&f)
			msg := f.failed
			if tt.wantSkip {
				msg = f.skipped
			}
			if (f.skipped != "") != tt.wantSkip || (f.failed != "") == tt.wantSkip {
				t.Fatalf("skipped=%q failed=%q, want skip=%v", f.skipped, f.failed, tt.wantSkip)
			}
			if !strings.Contains(msg, tt.wantInMsg) {
				t.Errorf("message %q does not contain %q", msg, tt.wantInMsg)
			}
		})
	}
}

func TestDatabaseName(t *testing.T) {
	long := strings.Repeat("VeryLongSubtestName/", 10)
	tests := []struct {
		testName string
		limit    int
		want     string
	}{
		{"TestFoo", pgMaxIdent, "txr_testfoo_0123abcd"},
		{"TestFoo/sub_case#01", pgMaxIdent, "txr_testfoo_sub_case_01_0123abcd"},
		{"TestÜber/ä b", pgMaxIdent, "txr_test_ber_b_0123abcd"},
		{"__/__", pgMaxIdent, "txr_test_0123abcd"},
		{"", mysqlMaxIdent, "txr_test_0123abcd"},
		{long, pgMaxIdent, "txr_verylongsubtestname_verylongsubtestname_verylongsu_0123abcd"},
		{long, mysqlMaxIdent, "txr_verylongsubtestname_verylongsubtestname_verylongsub_0123abcd"},
		// The cut lands just after an underscore, which is trimmed.
		{strings.Repeat("a", 49) + "/b", pgMaxIdent, "txr_" + strings.Repeat("a", 49) + "_0123abcd"},
		// No room for the test name at all.
		{"x", 13, "txr__0123abcd"},
	}
	valid := regexp.MustCompile(`^txr_[a-z0-9_]*_[0-9a-f]{8}$`)
	for _, tt := range tests {
		got := databaseName(tt.testName, tt.limit, "0123abcd")
		if got != tt.want {
			t.Errorf("databaseName(%q, %d) = %q, want %q", tt.testName, tt.limit, got, tt.want)
		}
		if len(got) > tt.limit && tt.limit >= 13 {
			t.Errorf("databaseName(%q, %d) = %q: %d bytes", tt.testName, tt.limit, got, len(got))
		}
		if !valid.MatchString(got) {
			t.Errorf("databaseName(%q, %d) = %q: not a plain identifier", tt.testName, tt.limit, got)
		}
	}
}

func TestRandomSuffix(t *testing.T) {
	a, b := randomSuffix(), randomSuffix()
	if !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(a) {
		t.Errorf("randomSuffix() = %q, want 8 hex digits", a)
	}
	if a == b {
		t.Errorf("randomSuffix() returned %q twice", a)
	}
}

func TestPostgresDSN(t *testing.T) {
	tests := []struct {
		admin, want string
	}{
		{
			"postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
			"postgres://postgres@127.0.0.1:5432/txr_x?sslmode=disable",
		},
		{
			"postgresql://u:p%40ss@db.example:5433?sslmode=require&application_name=ci",
			"postgresql://u:p%40ss@db.example:5433/txr_x?sslmode=require&application_name=ci",
		},
		{
			"postgres://u@h/other?dbname=other&sslmode=disable",
			"postgres://u@h/txr_x?sslmode=disable",
		},
		{
			"host=127.0.0.1 user=postgres dbname=test sslmode=disable",
			"host=127.0.0.1 user=postgres dbname=test sslmode=disable dbname=txr_x",
		},
	}
	for _, tt := range tests {
		got, err := postgresDSN(tt.admin, "txr_x")
		if err != nil || got != tt.want {
			t.Errorf("postgresDSN(%q) = %q, %v; want %q", tt.admin, got, err, tt.want)
		}
	}
}

func TestPostgresDSNErrorHidesPassword(t *testing.T) {
	for _, admin := range []string{"postgres://u:secret@h:notaport/db", "secret"} {
		_, err := postgresDSN(admin, "txr_x")
		if err == nil {
			t.Errorf("postgresDSN(%q): no error", admin)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("postgresDSN error %q repeats the DSN", err)
		}
	}
}

func TestMySQLDSN(t *testing.T) {
	tests := []struct {
		admin string
	}{
		{"root@tcp(127.0.0.1:3306)/test"},
		{"root:pw@tcp(db:3306)/test?multiStatements=true&loc=UTC"},
		{"u@unix(/run/mysqld/mysqld.sock)/?parseTime=false"},
	}
	for _, tt := range tests {
		got, err := mysqlDSN(tt.admin, "txr_x")
		if err != nil {
			t.Errorf("mysqlDSN(%q): %v", tt.admin, err)
			continue
		}
		admin, _ := mysql.ParseDSN(tt.admin)
		cfg, err := mysql.ParseDSN(got)
		if err != nil {
			t.Errorf("mysqlDSN(%q) = %q: %v", tt.admin, got, err)
			continue
		}
		if cfg.DBName != "txr_x" || !cfg.ParseTime || cfg.MultiStatements ||
			cfg.User != admin.User || cfg.Passwd != admin.Passwd || cfg.Addr != admin.Addr || cfg.Loc != admin.Loc {
			t.Errorf("mysqlDSN(%q) = %q: wrong database, flags or server", tt.admin, got)
		}
	}
	if _, err := mysqlDSN("not a dsn", "txr_x"); err == nil {
		t.Error("mysqlDSN(\"not a dsn\"): no error")
	}
}

func TestMySQLImage(t *testing.T) {
	tests := []struct {
		flavorEnv, imageEnv string
		flavor, image       string
		wantErr             bool
	}{
		{flavor: "mysql", image: "mysql:8.4"},
		{flavorEnv: "mysql", flavor: "mysql", image: "mysql:8.4"},
		{flavorEnv: "MariaDB", flavor: "mariadb", image: "mariadb:11.4"},
		{imageEnv: "mysql:8.0", flavor: "mysql", image: "mysql:8.0"},
		{imageEnv: "mariadb:10.11", flavor: "mariadb", image: "mariadb:10.11"},
		{imageEnv: "registry.example/MariaDB/server:11", flavor: "mariadb", image: "registry.example/MariaDB/server:11"},
		{flavorEnv: "mariadb", imageEnv: "mariadb:10.11", flavor: "mariadb", image: "mariadb:10.11"},
		{flavorEnv: "mysql", imageEnv: "mariadb:10.11", wantErr: true},
		{flavorEnv: "percona", wantErr: true},
	}
	for _, tt := range tests {
		getenv := func(k string) string {
			return map[string]string{envMySQLFlavor: tt.flavorEnv, envMySQLImage: tt.imageEnv}[k]
		}
		flavor, image, err := mysqlImage(getenv)
		if (err != nil) != tt.wantErr || flavor != tt.flavor || image != tt.image {
			t.Errorf("mysqlImage(flavor=%q, image=%q) = %q, %q, %v; want %q, %q, error %v",
				tt.flavorEnv, tt.imageEnv, flavor, image, err, tt.flavor, tt.image, tt.wantErr)
		}
	}
}

func TestPostgresContainerImage(t *testing.T) {
	tests := []struct {
		imageEnv, want string
	}{
		{"", "postgres:17-alpine"},
		{"postgres:13", "postgres:13"},
	}
	for _, tt := range tests {
		spec, err := postgresContainer(func(k string) string {
			return map[string]string{envPGImage: tt.imageEnv}[k]
		})
		if err != nil || spec.image != tt.want {
			t.Errorf("postgresContainer(image=%q) = %q, %v; want %q", tt.imageEnv, spec.image, err, tt.want)
		}
	}
}

func TestMySQLFlavorFromVersion(t *testing.T) {
	tests := []struct{ version, want string }{
		{"8.4.3", "mysql"},
		{"8.0.40", "mysql"},
		{"10.11.6-MariaDB-0+deb12u1", "mariadb"},
		{"11.4.4-MariaDB-ubu2404", "mariadb"},
	}
	for _, tt := range tests {
		if got := mysqlFlavor(tt.version); got != tt.want {
			t.Errorf("mysqlFlavor(%q) = %q, want %q", tt.version, got, tt.want)
		}
	}
}

func TestDropPostgresSQL(t *testing.T) {
	tests := []struct {
		versionNum int
		want       []string
	}{
		{170002, []string{`DROP DATABASE IF EXISTS "txr_x" WITH (FORCE)`}},
		{130000, []string{`DROP DATABASE IF EXISTS "txr_x" WITH (FORCE)`}},
		{120020, []string{
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
			`DROP DATABASE IF EXISTS "txr_x"`,
		}},
	}
	for _, tt := range tests {
		var got []string
		for _, s := range dropPostgresSQL("txr_x", tt.versionNum) {
			got = append(got, s.query)
		}
		if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
			t.Errorf("dropPostgresSQL(%d) = %q, want %q", tt.versionNum, got, tt.want)
		}
	}
}

func TestQuote(t *testing.T) {
	if got, want := quotePostgres(`a"b`), `"a""b"`; got != want {
		t.Errorf("quotePostgres = %s, want %s", got, want)
	}
	if got, want := quoteMySQL("a`b"), "`a``b`"; got != want {
		t.Errorf("quoteMySQL = %s, want %s", got, want)
	}
}

// TestResolveWithoutServer checks the path of a developer machine with
// neither a DSN nor Docker: a quick, unconfigured failure that names the
// variable to set, and no container start.
func TestResolveWithoutServer(t *testing.T) {
	noEnv := func(string) string { return "" }
	noDocker := func() error { return errors.New("no engine answers") }
	for _, b := range []backend{postgresBackend, mysqlBackend} {
		t.Run(b.name, func(t *testing.T) {
			container := b.container
			b.container = func(getenv func(string) string) (containerSpec, error) {
				spec, err := container(getenv)
				spec.run = func(context.Context) (testcontainers.Container, string, error) {
					t.Error("container started without Docker")
					return nil, "", errors.New("unreachable")
				}
				return spec, err
			}
			start := time.Now()
			r := b.resolve(noEnv, noDocker)
			if elapsed := time.Since(start); elapsed > time.Second {
				t.Errorf("resolve took %v", elapsed)
			}
			if r.err == nil || r.configured {
				t.Fatalf("resolve() = err %v, configured %v; want an unconfigured error", r.err, r.configured)
			}
			for _, want := range []string{"no " + b.name, b.dsnEnv + "=", "start Docker", "no engine answers"} {
				if !strings.Contains(r.err.Error(), want) {
					t.Errorf("error %q does not contain %q", r.err, want)
				}
			}
		})
	}
}

func TestResolveMisconfigured(t *testing.T) {
	dockerOK := func() error { return nil }
	tests := []struct {
		name    string
		backend backend
		env     map[string]string
		wantMsg string
	}{
		{
			name:    "unreachable PostgreSQL",
			backend: postgresBackend,
			env:     map[string]string{envPGDSN: "postgres://postgres:secret@127.0.0.1:1/test?sslmode=disable"},
			wantMsg: "TXRETRY_PG_DSN is set but its PostgreSQL server does not answer",
		},
		{
			name:    "unreachable MySQL",
			backend: mysqlBackend,
			env:     map[string]string{envMySQLDSN: "root:secret@tcp(127.0.0.1:1)/test"},
			wantMsg: "TXRETRY_MYSQL_DSN is set but its MySQL server does not answer",
		},
		{
			name:    "invalid PostgreSQL DSN",
			backend: postgresBackend,
			env:     map[string]string{envPGDSN: "secret"},
			wantMsg: "TXRETRY_PG_DSN is not a valid PostgreSQL DSN",
		},
		{
			name:    "invalid MySQL DSN",
			backend: mysqlBackend,
			env:     map[string]string{envMySQLDSN: "secret"},
			wantMsg: "TXRETRY_MYSQL_DSN is not a valid MySQL DSN",
		},
		{
			name:    "unknown MySQL flavor",
			backend: mysqlBackend,
			env:     map[string]string{envMySQLFlavor: "percona"},
			wantMsg: "TXRETRY_MYSQL_FLAVOR",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.backend
			b.pingTimeout = 300 * time.Millisecond
			r := b.resolve(func(k string) string { return tt.env[k] }, dockerOK)
			if r.err == nil || !r.configured {
				t.Fatalf("resolve() = err %v, configured %v; want a configured error", r.err, r.configured)
			}
			if !strings.Contains(r.err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", r.err, tt.wantMsg)
			}
			if strings.Contains(r.err.Error(), "secret") {
				t.Errorf("error %q contains the password", r.err)
			}
		})
	}
}

// fakeContainer records Terminate; every other method is unused.
type fakeContainer struct {
	testcontainers.Container
	terminated int
}

func (c *fakeContainer) Terminate(context.Context, ...testcontainers.TerminateOption) error {
	c.terminated++
	return nil
}

// TestResolveContainerFailure checks that a container that fails to start,
// or a testcontainers panic, becomes an unconfigured error and that a
// started-but-failed container is terminated at once.
func TestResolveContainerFailure(t *testing.T) {
	noEnv := func(string) string { return "" }
	dockerOK := func() error { return nil }
	tests := []struct {
		name           string
		run            func(*fakeContainer) (testcontainers.Container, string, error)
		wantMsg        string
		wantTerminated int
	}{
		{
			name: "wait strategy timed out",
			run: func(c *fakeContainer) (testcontainers.Container, string, error) {
				return c, "", errors.New("wait until ready: deadline exceeded")
			},
			wantMsg:        "container fake:1 did not start: wait until ready: deadline exceeded",
			wantTerminated: 1,
		},
		{
			name: "panic",
			run: func(*fakeContainer) (testcontainers.Container, string, error) {
				panic("no socket")
			},
			wantMsg: "testcontainers panicked: no socket",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ctr fakeContainer
			b := postgresBackend
			b.container = func(func(string) string) (containerSpec, error) {
				return containerSpec{image: "fake:1", run: func(context.Context) (testcontainers.Container, string, error) {
					return tt.run(&ctr)
				}}, nil
			}
			r := b.resolve(noEnv, dockerOK)
			if r.err == nil || r.configured {
				t.Fatalf("resolve() = err %v, configured %v; want an unconfigured error", r.err, r.configured)
			}
			for _, want := range []string{tt.wantMsg, "set TXRETRY_PG_DSN="} {
				if !strings.Contains(r.err.Error(), want) {
					t.Errorf("error %q does not contain %q", r.err, want)
				}
			}
			if ctr.terminated != tt.wantTerminated {
				t.Errorf("container terminated %d times, want %d", ctr.terminated, tt.wantTerminated)
			}
		})
	}
}

// TestResolveContainerStarted plays a started container with the server of
// TXRETRY_PG_DSN (or the one dbtest found) and checks that it is used and
// terminated once by terminateContainers.
func TestResolveContainerStarted(t *testing.T) {
	admin := PostgresAdmin(t)
	// Set aside containers this binary really started, so that only the
	// fake is terminated here.
	containers.mu.Lock()
	started := containers.list
	containers.list = nil
	containers.mu.Unlock()
	t.Cleanup(func() {
		containers.mu.Lock()
		containers.list = append(started, containers.list...)
		containers.mu.Unlock()
	})

	var ctr fakeContainer
	b := postgresBackend
	b.container = func(func(string) string) (containerSpec, error) {
		return containerSpec{image: "fake:1", run: func(context.Context) (testcontainers.Container, string, error) {
			return &ctr, admin, nil
		}}, nil
	}
	r := b.resolve(func(string) string { return "" }, func() error { return nil })
	if r.err != nil || r.admin != admin || r.source != "container fake:1" || r.info.flavor != "postgres" {
		t.Fatalf("resolve() = admin ok %v, source %q, info %+v, err %v", r.admin == admin, r.source, r.info, r.err)
	}
	if err := terminateContainers(); err != nil {
		t.Fatalf("terminateContainers: %v", err)
	}
	if ctr.terminated != 1 {
		t.Errorf("container terminated %d times, want 1", ctr.terminated)
	}
	if err := terminateContainers(); err != nil || ctr.terminated != 1 {
		t.Errorf("second terminateContainers: %v, terminated %d times", err, ctr.terminated)
	}
}
