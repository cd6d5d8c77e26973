package dbconn

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

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

func TestFindUnavailable(t *testing.T) {
	noDocker := func(context.Context) error { return errors.New("no socket") }
	tests := []struct {
		name           string
		engine         Engine
		env            map[string]string
		wantConfigured bool
		wantInMessage  []string
	}{
		{
			name:          "postgres without DSN or Docker says what to set",
			engine:        Postgres,
			wantInMessage: []string{"PostgreSQL unavailable", EnvPGDSN, "start Docker", DefaultPGImage, "no socket"},
		},
		{
			name:          "mysql without DSN or Docker says what to set",
			engine:        MySQL,
			wantInMessage: []string{"MySQL unavailable", EnvMySQLDSN, "start Docker", DefaultMySQLImage},
		},
		{
			name:          "mariadb flavor names the mariadb image",
			engine:        MySQL,
			env:           map[string]string{EnvMySQLFlavor: "mariadb"},
			wantInMessage: []string{DefaultMariaDBImage},
		},
		{
			name:           "bad flavor is a configuration error",
			engine:         MySQL,
			env:            map[string]string{EnvMySQLFlavor: "oracle"},
			wantConfigured: true,
			wantInMessage:  []string{EnvMySQLFlavor},
		},
		{
			name:           "DSN that does not answer is a configuration error",
			engine:         Postgres,
			env:            map[string]string{EnvPGDSN: "postgres://nobody:secret@127.0.0.1:1/db?connect_timeout=1"},
			wantConfigured: true,
			wantInMessage:  []string{EnvPGDSN + " is set but its server does not answer"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			srv, err := find(ctx, tt.engine, func(k string) string { return tt.env[k] }, noDocker)
			ue, ok := errors.AsType[*UnavailableError](err)
			if srv != nil || !ok {
				t.Fatalf("find = %v, %v; want an *UnavailableError", srv, err)
			}
			if ue.Configured != tt.wantConfigured {
				t.Errorf("Configured = %v, want %v", ue.Configured, tt.wantConfigured)
			}
			for _, s := range tt.wantInMessage {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			t.Log(err)
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows the password", err)
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
