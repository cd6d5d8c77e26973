package dbserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// calls records which ways of finding a server a resolver tried.
type calls struct {
	docker, container, binaries, local int
}

// fakeResolver returns a resolver over env whose Docker check, container
// start, binary search and throwaway start are fakes that record their
// calls: Docker answers when dockerErr is nil, the binaries are found when
// binErr is nil, a container or throwaway server "starts" as real, a
// server of the test binary's own.
func fakeResolver(t *testing.T, env map[string]string, dockerErr, binErr, startErr error, c *calls) resolver {
	return resolver{
		getenv: func(k string) string { return env[k] },
		docker: func(context.Context) error { c.docker++; return dockerErr },
		container: func(_ context.Context, e Engine, spec containerSpec) (*Server, error) {
			c.container++
			if startErr != nil {
				return nil, startErr
			}
			return &Server{Engine: e, DSN: throwaway(t, e).DSN, Source: "container " + spec.image}, nil
		},
		binaries: func(e Engine) (*binaries, error) {
			c.binaries++
			if binErr != nil {
				return nil, binErr
			}
			return &binaries{server: "/opt/fake/bin/server"}, nil
		},
		local: func(_ context.Context, e Engine, _ *binaries) (*Server, error) {
			c.local++
			if startErr != nil {
				return nil, startErr
			}
			return &Server{Engine: e, DSN: throwaway(t, e).DSN, Source: "throwaway server"}, nil
		},
	}
}

// TestResolveOrder checks which way is taken, and that the ways after it
// are not even tried, with CI set and unset (CI changes nothing here: it
// only turns skips into failures in dbservertest).
func TestResolveOrder(t *testing.T) {
	noDocker := errors.New("no socket")
	for _, ci := range []string{"", "true"} {
		for _, e := range []Engine{Postgres, MySQL} {
			tests := []struct {
				name       string
				env        map[string]string
				dockerErr  error
				binErr     error
				wantSource string
				want       calls
			}{
				{"DSN set: used, nothing else tried", map[string]string{e.EnvVar(): ""}, nil, nil,
					e.EnvVar(), calls{}},
				{"Docker answers: container", nil, nil, nil,
					"container ", calls{docker: 1, container: 1}},
				{"no Docker: throwaway server", nil, noDocker, nil,
					"throwaway server", calls{docker: 1, binaries: 1, local: 1}},
			}
			for _, tt := range tests {
				t.Run(e.String()+"/CI="+ci+"/"+tt.name, func(t *testing.T) {
					t.Setenv(EnvCI, ci)
					env := map[string]string{}
					if _, ok := tt.env[e.EnvVar()]; ok {
						env[e.EnvVar()] = throwaway(t, e).DSN
					}
					var c calls
					srv, err := fakeResolver(t, env, tt.dockerErr, tt.binErr, nil, &c).find(context.Background(), e)
					if err != nil {
						t.Fatalf("find: %v", err)
					}
					if !strings.HasPrefix(srv.Source, tt.wantSource) || srv.Version == "" {
						t.Errorf("server %v (source %q), want source %q and a version", srv, srv.Source, tt.wantSource)
					}
					if c != tt.want {
						t.Errorf("calls %+v, want %+v", c, tt.want)
					}
				})
			}
		}
	}
}

// TestResolveErrors checks each error: its message, whether it is a
// configuration error (which fails a test even outside CI), and that the
// ways after a set DSN are never tried.
func TestResolveErrors(t *testing.T) {
	noDocker := errors.New("no socket")
	noBinaries := errors.New("initdb, postgres not found on PATH")
	tests := []struct {
		name           string
		engine         Engine
		env            map[string]string
		dockerErr      error
		binErr         error
		startErr       error
		wantConfigured bool
		wantIn         []string
		wantCalls      calls
	}{
		{
			name:           "PostgreSQL DSN set but dead",
			engine:         Postgres,
			env:            map[string]string{EnvPGDSN: "postgres://postgres:secret@127.0.0.1:1/test?sslmode=disable&connect_timeout=1"},
			wantConfigured: true,
			wantIn:         []string{"PostgreSQL unavailable: TXRETRY_PG_DSN is set but its server does not answer"},
		},
		{
			name:           "MySQL DSN set but dead",
			engine:         MySQL,
			env:            map[string]string{EnvMySQLDSN: "root:secret@tcp(127.0.0.1:1)/test?timeout=1s"},
			wantConfigured: true,
			wantIn:         []string{"MySQL unavailable: TXRETRY_MYSQL_DSN is set but its server does not answer"},
		},
		{
			name:           "PostgreSQL DSN invalid",
			engine:         Postgres,
			env:            map[string]string{EnvPGDSN: "secret"},
			wantConfigured: true,
			wantIn:         []string{"TXRETRY_PG_DSN is not a valid PostgreSQL DSN"},
		},
		{
			name:           "MySQL DSN invalid",
			engine:         MySQL,
			env:            map[string]string{EnvMySQLDSN: "secret"},
			wantConfigured: true,
			wantIn:         []string{"TXRETRY_MYSQL_DSN is not a valid MySQL DSN"},
		},
		{
			name:           "bad flavor",
			engine:         MySQL,
			env:            map[string]string{EnvMySQLFlavor: "percona"},
			wantConfigured: true,
			wantIn:         []string{EnvMySQLFlavor},
		},
		{
			name:           "image set but no Docker",
			engine:         MySQL,
			env:            map[string]string{EnvMySQLImage: "mariadb:11.8"},
			dockerErr:      noDocker,
			wantConfigured: true,
			wantIn:         []string{"TXRETRY_MYSQL_IMAGE is set but Docker is not available: no socket"},
			wantCalls:      calls{docker: 1},
		},
		{
			name:      "container fails",
			engine:    Postgres,
			startErr:  errors.New("pull access denied"),
			wantIn:    []string{"container postgres:17-alpine did not start: pull access denied", "set TXRETRY_PG_DSN"},
			wantCalls: calls{docker: 1, container: 1},
		},
		{
			name:      "PostgreSQL: nothing at all",
			engine:    Postgres,
			dockerErr: noDocker,
			binErr:    noBinaries,
			wantIn: []string{
				"TXRETRY_PG_DSN is not set", "Docker is not available (no socket)", "no PostgreSQL binaries are installed (initdb, postgres not found on PATH)",
				"set TXRETRY_PG_DSN (for example postgres://", "or start Docker so that a postgres:17-alpine container can run",
				"or install the PostgreSQL server binaries (package postgresql on Debian/Ubuntu",
			},
			wantCalls: calls{docker: 1, binaries: 1},
		},
		{
			name:      "MySQL: nothing at all",
			engine:    MySQL,
			dockerErr: noDocker,
			binErr:    errors.New("mariadbd, mysqld not found on PATH"),
			wantIn: []string{
				"TXRETRY_MYSQL_DSN is not set", "Docker is not available (no socket)", "no MySQL binaries are installed",
				"set TXRETRY_MYSQL_DSN (for example", "or start Docker so that a mysql:8.4 container can run",
				"or install the MySQL server binaries (package mariadb-server on Debian/Ubuntu",
			},
			wantCalls: calls{docker: 1, binaries: 1},
		},
		{
			name:      "throwaway server fails",
			engine:    MySQL,
			dockerErr: noDocker,
			startErr:  errors.New("mariadbd exited: exit status 1"),
			wantIn:    []string{"a throwaway server from /opt/fake/bin/server did not start: mariadbd exited", "mariadb-server"},
			wantCalls: calls{docker: 1, binaries: 1, local: 1},
		},
	}
	for _, ci := range []string{"", "true"} {
		for _, tt := range tests {
			t.Run("CI="+ci+"/"+tt.name, func(t *testing.T) {
				t.Setenv(EnvCI, ci)
				// A dead server is pinged until the context ends (a server
				// that is starting gets PingTimeout): keep it short.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				var c calls
				start := time.Now()
				srv, err := fakeResolver(t, tt.env, tt.dockerErr, tt.binErr, tt.startErr, &c).find(ctx, tt.engine)
				ue, ok := errors.AsType[*UnavailableError](err)
				if srv != nil || !ok {
					t.Fatalf("find = %v, %v; want an *UnavailableError", srv, err)
				}
				if ue.Configured != tt.wantConfigured {
					t.Errorf("Configured = %v, want %v", ue.Configured, tt.wantConfigured)
				}
				for _, s := range tt.wantIn {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q\ndoes not contain %q", err, s)
					}
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("error %q shows the password", err)
				}
				if c != tt.wantCalls {
					t.Errorf("calls %+v, want %+v: a set DSN must never fall back", c, tt.wantCalls)
				}
				if d := time.Since(start); d > 3*time.Second {
					t.Errorf("find took %v", d)
				}
			})
		}
	}
}

// TestFindBinaries checks the search for installed binaries in fake
// install trees.
func TestFindBinaries(t *testing.T) {
	exe := func(t *testing.T, path string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho 'mysqld  Ver 8.4.3 for Linux'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Run("PostgreSQL needs initdb and postgres in one directory", func(t *testing.T) {
		root := t.TempDir()
		exe(t, filepath.Join(root, "a/initdb"))
		exe(t, filepath.Join(root, "b/postgres"))
		server := exe(t, filepath.Join(root, "c/postgres"))
		initdb := exe(t, filepath.Join(root, "c/initdb"))
		dirs := []string{filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")}
		b, err := findBinaries(Postgres, dirs)
		if err != nil || b.server != server || b.initdb != initdb {
			t.Errorf("findBinaries = %+v, %v; want %s and %s", b, err, server, initdb)
		}
		_, err = findBinaries(Postgres, dirs[:2])
		if err == nil || !strings.Contains(err.Error(), "initdb, postgres not found") || !strings.Contains(err.Error(), dirs[0]) {
			t.Errorf("error %v: want one naming the programs and the directories", err)
		}
	})
	t.Run("MariaDB: server in sbin, install script in the sibling bin", func(t *testing.T) {
		root := t.TempDir()
		server := exe(t, filepath.Join(root, "usr/sbin/mariadbd"))
		install := exe(t, filepath.Join(root, "usr/bin/mariadb-install-db"))
		b, err := findBinaries(MySQL, []string{filepath.Join(root, "usr/sbin")})
		if err != nil || b.server != server || b.initdb != install || !b.mariadb {
			t.Errorf("findBinaries = %+v, %v; want %s and %s", b, err, server, install)
		}
	})
	t.Run("MySQL initializes with mysqld itself", func(t *testing.T) {
		root := t.TempDir()
		server := exe(t, filepath.Join(root, "bin/mysqld"))
		b, err := findBinaries(MySQL, []string{filepath.Join(root, "bin")})
		if err != nil || b.server != server || b.initdb != "" || b.mariadb {
			t.Errorf("findBinaries = %+v, %v; want MySQL's %s alone", b, err, server)
		}
	})
	t.Run("nothing", func(t *testing.T) {
		_, err := findBinaries(MySQL, []string{t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), "mariadbd, mysqld not found") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("newest version first", func(t *testing.T) {
		dirs := []string{"/usr/lib/postgresql/9/bin", "/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/13/bin"}
		slices.SortFunc(dirs, func(a, b string) int { return compareVersions(b, a) })
		if dirs[0] != "/usr/lib/postgresql/17/bin" || dirs[2] != "/usr/lib/postgresql/9/bin" {
			t.Errorf("sorted %v", dirs)
		}
	})
}
