package cli

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/dbserver/dbservertest"
)

func TestMain(m *testing.M) { dbservertest.Main(m) }

func TestEngines(t *testing.T) {
	tests := []struct {
		db      string
		want    []dbserver.Engine
		wantErr string
	}{
		{"all", []dbserver.Engine{dbserver.Postgres, dbserver.MySQL}, ""},
		{"postgres", []dbserver.Engine{dbserver.Postgres}, ""},
		{"mysql", []dbserver.Engine{dbserver.MySQL}, ""},
		{"oracle", nil, `-db "oracle": want all, postgres or mysql`},
		{"", nil, `-db "": want all, postgres or mysql`},
	}
	for _, tt := range tests {
		got, err := Engines(tt.db)
		if !slices.Equal(got, tt.want) || fmt.Sprint(err) != cmp.Or(tt.wantErr, "<nil>") {
			t.Errorf("Engines(%q) = %v, %v; want %v, %q", tt.db, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantN   int
		wantErr string
	}{
		{"flags only", []string{"-n", "3"}, 3, "<nil>"},
		{"no arguments", nil, 1, "<nil>"},
		{"positional argument", []string{"-n", "3", "now"}, 3, `unexpected arguments: ["now"]`},
		{"unknown flag", []string{"-m", "3"}, 1, "flag provided but not defined: -m"},
		{"help", []string{"-h"}, 1, flag.ErrHelp.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			n := fs.Int("n", 1, "a number")
			err := Parse(fs, tt.args)
			if *n != tt.wantN || fmt.Sprint(err) != tt.wantErr {
				t.Errorf("Parse(%q): n = %d, error %v; want %d, %s", tt.args, *n, err, tt.wantN, tt.wantErr)
			}
		})
	}
}

func TestUsageStatus(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		want       int
		wantStderr string
	}{
		{"help", flag.ErrHelp, 0, ""},
		{"bad command line", errors.New("-workers must be positive"), 2, "prog: -workers must be positive\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if got := UsageStatus("prog", tt.err, &stderr); got != tt.want || stderr.String() != tt.wantStderr {
				t.Errorf("UsageStatus = %d, stderr %q; want %d, %q", got, stderr.String(), tt.want, tt.wantStderr)
			}
		})
	}
}

// Errors of dbserver.FindAll, for the tests.
var (
	absentPG    = &dbserver.UnavailableError{Engine: dbserver.Postgres, Err: errors.New("TXRETRY_PG_DSN is not set")}
	absentMySQL = &dbserver.UnavailableError{Engine: dbserver.MySQL, Err: errors.New("TXRETRY_MYSQL_DSN is not set")}
	brokenMySQL = &dbserver.UnavailableError{Engine: dbserver.MySQL, Configured: true, Err: errors.New("no answer")}
)

func TestMisconfigured(t *testing.T) {
	tests := []struct {
		name    string
		findErr error
		want    bool
	}{
		{"no error", nil, false},
		{"one absent", errors.Join(absentPG), false},
		{"both absent", errors.Join(absentPG, absentMySQL), false},
		{"one broken", errors.Join(absentPG, brokenMySQL), true},
		{"broken, not joined", brokenMySQL, true},
		{"not an UnavailableError", errors.Join(absentPG, errors.New("other")), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Misconfigured(tt.findErr); got != tt.want {
				t.Errorf("Misconfigured(%v) = %v, want %v", tt.findErr, got, tt.want)
			}
		})
	}
}

// TestEachServerVerdict checks EachServer's output and exit status, with
// servers that fn does not connect to.
func TestEachServerVerdict(t *testing.T) {
	pg := &dbserver.Server{Engine: dbserver.Postgres, Version: "17.0", Source: "test"}
	my := &dbserver.Server{Engine: dbserver.MySQL, Version: "8.4.0", Source: "test"}
	tests := []struct {
		name     string
		servers  []*dbserver.Server
		findErr  error
		failOn   dbserver.Engine
		want     string
		wantCode int
	}{
		{
			name: "all run", servers: []*dbserver.Server{pg, my},
			want: "ran on PostgreSQL 17.0 (test)\nran on MySQL 8.4.0 (test)\nok\n",
		},
		{
			name: "one absent", servers: []*dbserver.Server{pg}, findErr: errors.Join(absentMySQL),
			want: absentMySQL.Error() + "\n\nran on PostgreSQL 17.0 (test)\nok\n",
		},
		{
			name: "one misconfigured", servers: []*dbserver.Server{pg}, findErr: errors.Join(brokenMySQL),
			want: brokenMySQL.Error() + "\n\nran on PostgreSQL 17.0 (test)\n", wantCode: 1,
		},
		{
			name: "none found", findErr: errors.Join(absentPG, absentMySQL),
			want: absentPG.Error() + "\n" + absentMySQL.Error() + "\n\nFAIL: no database reachable\n", wantCode: 1,
		},
		{
			name: "fn fails on one", servers: []*dbserver.Server{pg, my}, failOn: dbserver.MySQL,
			want: "ran on PostgreSQL 17.0 (test)\nran on MySQL 8.4.0 (test)\n  FAIL: boom\n\n", wantCode: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			code := eachServer(context.Background(), &out, tt.servers, tt.findErr, func(_ context.Context, srv *dbserver.Server) error {
				fmt.Fprintf(&out, "ran on %s\n", srv)
				if srv.Engine == tt.failOn {
					return errors.New("boom")
				}
				return nil
			})
			if code != tt.wantCode || out.String() != tt.want {
				t.Errorf("eachServer = %d, output:\n%s\nwant %d, output:\n%s", code, out.String(), tt.wantCode, tt.want)
			}
		})
	}
}

// TestRunBoundsBody checks the frame around body without servers: body gets
// a context bounded by Timeout, and Run returns body's status.
func TestRunBoundsBody(t *testing.T) {
	p := Program{Name: "prog", Timeout: time.Hour, Stdout: io.Discard, Stderr: io.Discard}
	code := p.Run(func(ctx context.Context, servers []*dbserver.Server, findErr error) int {
		deadline, ok := ctx.Deadline()
		if left := time.Until(deadline); !ok || left > time.Hour || left < 59*time.Minute {
			t.Errorf("context deadline in %v (set %v), want in an hour", left, ok)
		}
		if len(servers) != 0 || findErr != nil {
			t.Errorf("servers %v, error %v; want none", servers, findErr)
		}
		return 3
	})
	if code != 3 {
		t.Errorf("Run = %d, want body's 3", code)
	}
}

// TestRunFindsServer runs the frame as a program does, on the PostgreSQL
// server of the test, found through TXRETRY_PG_DSN.
func TestRunFindsServer(t *testing.T) {
	srv := dbservertest.EnvServer(t, dbserver.Postgres)
	var stdout, stderr bytes.Buffer
	p := Program{Name: "prog", Engines: []dbserver.Engine{dbserver.Postgres}, Timeout: time.Minute, Stdout: &stdout, Stderr: &stderr}
	code := p.EachServer(func(ctx context.Context, got *dbserver.Server) error {
		// EnvServer put the test's server into TXRETRY_PG_DSN.
		if got.Engine != dbserver.Postgres || got.Source != dbserver.EnvPGDSN || got.DSN != srv.DSN || got.Version != srv.Version {
			t.Errorf("server %v, want %v", got, srv)
		}
		return ctx.Err()
	})
	if code != 0 || stdout.String() != "ok\n" || stderr.Len() != 0 {
		t.Errorf("EachServer = %d, stdout %q, stderr %q; want 0, \"ok\\n\" and nothing", code, stdout.String(), stderr.String())
	}
}

func TestSyncWriter(t *testing.T) {
	var buf bytes.Buffer
	w := SyncWriter(&buf)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if _, err := io.WriteString(w, "line\n"); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got := strings.Count(buf.String(), "line\n"); got != 800 || buf.Len() != 800*len("line\n") {
		t.Errorf("%d whole lines in %d bytes, want 800", got, buf.Len())
	}
}
