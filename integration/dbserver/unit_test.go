package dbserver

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Tests of the functions that need no server: names, DSNs, SQL text,
// container flavors.

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

func TestRebind(t *testing.T) {
	tests := []struct {
		name   string
		engine Engine
		query  string
		want   string
	}{
		{"postgres numbers placeholders", Postgres, "SELECT a FROM t WHERE b = ? AND c = ?", "SELECT a FROM t WHERE b = $1 AND c = $2"},
		{"postgres skips string literals", Postgres, "SELECT '?' FROM t WHERE b = ?", "SELECT '?' FROM t WHERE b = $1"},
		{"postgres skips quoted identifiers", Postgres, `SELECT "a?" FROM t WHERE b = ?`, `SELECT "a?" FROM t WHERE b = $1`},
		{"postgres without placeholders", Postgres, "SELECT 1", "SELECT 1"},
		{"mysql unchanged", MySQL, "SELECT a FROM t WHERE b = ?", "SELECT a FROM t WHERE b = ?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.engine.Rebind(tt.query); got != tt.want {
				t.Errorf("Rebind(%q) = %q, want %q", tt.query, got, tt.want)
			}
		})
	}
}

func TestWithPostgresParam(t *testing.T) {
	tests := []struct {
		name string
		dsn  string
		want string
	}{
		{"url", "postgres://u@h:5432/db?sslmode=disable", "postgres://u@h:5432/db?search_path=s&sslmode=disable"},
		{"url replaces", "postgresql://u@h/db?search_path=x", "postgresql://u@h/db?search_path=s"},
		{"keyword", "host=h user=u dbname=db", "host=h user=u dbname=db search_path=s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := withPostgresParam(tt.dsn, "search_path", "s")
			if err != nil || got != tt.want {
				t.Errorf("withPostgresParam(%q) = %q, %v; want %q", tt.dsn, got, err, tt.want)
			}
		})
	}
}

func TestWithPostgresParamHidesPassword(t *testing.T) {
	_, err := withPostgresParam("postgres://u:secret@h:bad/db", "search_path", "s")
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error = %v, want one without the password", err)
	}
}

func TestMySQLFlavor(t *testing.T) {
	tests := []struct {
		name, flavor, image   string
		wantFlavor, wantImage string
		wantErr               bool
	}{
		{"default", "", "", "mysql", DefaultMySQLImage, false},
		{"mariadb", "mariadb", "", "mariadb", DefaultMariaDBImage, false},
		{"MariaDB upper case", "MariaDB", "", "mariadb", DefaultMariaDBImage, false},
		{"image implies mariadb", "", "mariadb:10.11", "mariadb", "mariadb:10.11", false},
		{"own mysql image", "mysql", "mysql:8.0", "mysql", "mysql:8.0", false},
		{"contradiction", "mysql", "mariadb:11.4", "", "", true},
		{"unknown flavor", "percona", "", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{EnvMySQLFlavor: tt.flavor, EnvMySQLImage: tt.image}
			flavor, image, err := mysqlFlavor(func(k string) string { return env[k] })
			if flavor != tt.wantFlavor || image != tt.wantImage || (err != nil) != tt.wantErr {
				t.Errorf("mysqlFlavor = %q, %q, %v; want %q, %q, error %v",
					flavor, image, err, tt.wantFlavor, tt.wantImage, tt.wantErr)
			}
		})
	}
}

// TestDockerCheckIsQuick checks that, without a Docker engine, finding out
// takes seconds, not the container timeout. With an engine it only checks
// that the answer is quick.
func TestDockerCheckIsQuick(t *testing.T) {
	start := time.Now()
	err := checkDocker(context.Background())
	if d := time.Since(start); d > DockerTimeout+2*time.Second {
		t.Errorf("checkDocker took %v (err %v), want at most about %v", d, err, DockerTimeout)
	}
	t.Logf("checkDocker: %v in %v", err, time.Since(start))
}

func TestNamespaceRejectsBadNames(t *testing.T) {
	srv := &Server{Engine: Postgres}
	for _, name := range []string{"", "Demo", "1demo", "demo-x", "demo;drop", strings.Repeat("a", 41)} {
		if _, err := srv.Namespace(context.Background(), name); !errors.Is(err, ErrBadName) {
			t.Errorf("Namespace(%q) error = %v, want ErrBadName", name, err)
		}
	}
}

func TestApplyDefaults(t *testing.T) {
	env := map[string]string{"SET": "mine", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	set := func(k, v string) error { env[k] = v; return nil }
	defaults := [][2]string{{"SET", "d1"}, {"EMPTY", "d2"}, {"UNSET", "d3"}}
	if err := applyDefaults(defaults, lookup, set); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"SET": "mine", "EMPTY": "", "UNSET": "d3"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	setErr := errors.New("read-only environment")
	unset := func(string) (string, bool) { return "", false }
	err := applyDefaults(defaults, unset, func(string, string) error { return setErr })
	if !errors.Is(err, setErr) {
		t.Errorf("applyDefaults with a failing set = %v, want %v", err, setErr)
	}
}

// TestTestcontainersEnvBeforeDocker: the Docker check, the first call into
// testcontainers-go on every path, leaves the host override and the
// disabled reaper in the environment, so that testcontainers-go never dials
// the default gateway of a machine with a /.dockerenv. When the test
// process started without them, they are the loopback and true.
func TestTestcontainersEnvBeforeDocker(t *testing.T) {
	before := map[string]bool{}
	for _, kv := range testcontainersDefaults {
		_, before[kv[0]] = os.LookupEnv(kv[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), DockerTimeout)
	defer cancel()
	_ = checkDocker(ctx) // with or without an engine
	for _, kv := range testcontainersDefaults {
		got, ok := os.LookupEnv(kv[0])
		switch {
		case !ok:
			t.Errorf("%s is unset after the Docker check", kv[0])
		case !before[kv[0]] && got != kv[1]:
			t.Errorf("%s = %q after the Docker check, want %q", kv[0], got, kv[1])
		}
	}
	if got := os.Getenv("TESTCONTAINERS_HOST_OVERRIDE"); !before["TESTCONTAINERS_HOST_OVERRIDE"] && got != "127.0.0.1" {
		t.Errorf("host override %q is not the loopback", got)
	}
}
