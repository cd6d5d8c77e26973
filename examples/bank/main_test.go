package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/dbserver/dbservertest"
)

func TestMain(m *testing.M) { dbservertest.Main(m) }

// smallConfig is a burst small enough for a smoke test that still conflicts.
var smallConfig = config{
	workers:     8,
	transfers:   10,
	accounts:    4,
	balance:     1000,
	maxAmount:   50,
	deadline:    5 * time.Second,
	maxAttempts: 10,
}

// TestBank runs the demo with every driver on every reachable server and
// asserts its invariants.
func TestBank(t *testing.T) {
	for _, e := range []dbserver.Engine{dbserver.Postgres, dbserver.MySQL} {
		t.Run(e.String(), func(t *testing.T) {
			srv := dbservertest.Server(t, e)
			ns := dbservertest.Namespace(t, srv, "txretry_test_bank")
			for _, d := range driversFor(e) {
				t.Run(string(d), func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					rep, err := runBank(ctx, srv, ns, d, smallConfig)
					if err != nil {
						t.Fatal(err)
					}
					var buf bytes.Buffer
					printReport(&buf, rep)
					t.Log("\n" + buf.String())

					if !rep.invariant.ok() {
						t.Errorf("invariant failed: %v", rep.invariant.problems)
					}
					if want := smallConfig.workers * smallConfig.transfers; rep.calls != want {
						t.Errorf("calls = %d, want %d", rep.calls, want)
					}
					if rep.attempts < rep.calls {
						t.Errorf("attempts = %d, fewer than the %d calls", rep.attempts, rep.calls)
					}
					if rep.committed == 0 {
						t.Error("no transfer committed")
					}
				})
			}
		})
	}
}

// TestCheckDetectsViolations makes sure the invariant check is not vacuous:
// after tampering with the tables, it reports each problem.
func TestCheckDetectsViolations(t *testing.T) {
	srv := dbservertest.Server(t, dbserver.Postgres)
	ns := dbservertest.Namespace(t, srv, "txretry_test_bank_check")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := smallConfig
	cfg.workers, cfg.transfers = 2, 5

	b, err := openBank(ctx, srv, ns, pgxStdlib, cfg.workers)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if err := b.setup(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	outcomes, _ := b.burst(ctx, cfg, &counter{retryable: map[string]int{}})
	var committed []int64
	for _, o := range outcomes {
		committed = append(committed, o.committed...)
	}
	if inv, err := b.check(ctx, cfg, committed, nil); err != nil || !inv.ok() {
		t.Fatalf("check before tampering = %v, %v; want ok", inv.problems, err)
	}

	tamper := []string{
		"UPDATE " + ns.Table("bank_accounts") + " SET balance = balance + 1 WHERE id = 1",
		"INSERT INTO " + ns.Table("bank_transfers") + " (id, from_id, to_id, amount) VALUES (999999, 1, 2, 0)",
		"DELETE FROM " + ns.Table("bank_transfers") + " WHERE id = " + "(SELECT MIN(id) FROM " + ns.Table("bank_transfers") + " WHERE id < 999999)",
	}
	for _, stmt := range tamper {
		if _, err := b.db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	inv, err := b.check(ctx, cfg, committed, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(inv.problems, "; ")
	for _, want := range []string{"total balance", "missing", "recorded although", "do not match"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q do not mention %q", got, want)
		}
	}
}

// TestRun runs the program as `go run ./bank` would, with a small burst,
// when the servers come from the environment (with containers, run would
// start containers of its own).
func TestRun(t *testing.T) {
	srv := dbservertest.EnvServer(t, dbserver.Postgres)
	ns := dbservertest.Namespace(t, srv, "txretry_test_bank_run")
	args := []string{"-db", "postgres", "-namespace", ns.Name,
		"-workers", "4", "-transfers", "5", "-accounts", "3"}
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	t.Log("\n" + stdout.String() + stderr.String())
	if code != 0 || !strings.Contains(stdout.String(), "ok: every invariant holds") {
		t.Errorf("run = %d, want 0 and every invariant holding", code)
	}
}

func TestFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"bad db", []string{"-db", "oracle"}, 2},
		{"one account", []string{"-accounts", "1"}, 2},
		{"no workers", []string{"-workers", "0"}, 2},
		{"stray argument", []string{"now"}, 2},
		{"help", []string{"-h"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if got := run(tt.args, &out, &out); got != tt.want {
				t.Errorf("run(%q) = %d, want %d; output:\n%s", tt.args, got, tt.want, out.String())
			}
		})
	}
}
