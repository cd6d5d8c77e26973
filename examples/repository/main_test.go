package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txretry/txretry/examples/repository/internal/gensum"
	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/dbserver/dbservertest"
)

func TestMain(m *testing.M) { dbservertest.Main(m) }

// storeOf names the store package of each driver, for the tests' names.
var storeOf = map[driver]string{pgxNative: "pgxstore", pgxStdlib: "pgstore", mysqlSQL: "mysqlstore"}

// TestDemo places concurrent orders with every driver, through the code
// sqlc generated for it, and asserts that no unit is lost or oversold.
func TestDemo(t *testing.T) {
	tests := []struct {
		engine     dbserver.Engine
		isolations []string
		codes      []string // the retryable errors the conflicts may raise
	}{
		// 55P03: the lock timeout (pgxretry's 50 ms, or database/sql's once
		// the manager armed it) ends a long lock wait; it is retried.
		{dbserver.Postgres, []string{"serializable", "repeatable-read"}, []string{"40001", "40P01", "55P03"}},
		// On MySQL and MariaDB, REPEATABLE READ reads a snapshot without
		// locks and loses updates as READ COMMITTED does; only
		// SERIALIZABLE (locking reads, deadlocks 1213) keeps the invariant.
		{dbserver.MySQL, []string{"serializable"}, []string{"1213"}},
	}
	for _, tt := range tests {
		t.Run(tt.engine.String(), func(t *testing.T) {
			srv := dbservertest.Server(t, tt.engine)
			ns := dbservertest.Namespace(t, srv, "txretry_test_repository")
			for _, d := range driversFor(tt.engine) {
				for _, isolation := range tt.isolations {
					t.Run(storeOf[d]+"/"+isolation, func(t *testing.T) {
						testDemo(t, ns, d, isolation, tt.codes)
					})
				}
			}
		})
	}
}

// testDemo is one run of TestDemo.
func testDemo(t *testing.T, ns dbserver.Namespace, d driver, isolation string, codes []string) {
	o, err := parseFlags([]string{"-isolation", isolation, "-customers", "8", "-orders", "4", "-stock", "40"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := demo(ctx, ns, d, o)
	var out bytes.Buffer
	printReport(&out, rep)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.ok() {
		t.Error("invariant failed")
	}
	if got := rep.placed + rep.outOfStock; got != 8*4 || len(rep.failed) != 0 {
		t.Errorf("%d orders placed or refused and %v failed, want all 32 placed or refused", got, rep.failed)
	}
	if rep.placed == 0 || len(rep.sampleLines) == 0 {
		t.Errorf("%d orders placed, %d of them listed for %s; want some", rep.placed, len(rep.sampleLines), rep.sample)
	}
	// Every attempt is an order's first or follows a retryable error (how
	// many conflicts a run meets varies; TestConflictRetried makes one
	// for certain), and the errors are the engine's conflicts.
	retries := 0
	for code, n := range rep.retries {
		if !slices.Contains(codes, code) {
			t.Errorf("retryable error %s ×%d, want only %v", code, n, codes)
		}
		retries += n
	}
	if rep.attempts != rep.placed+rep.outOfStock+retries {
		t.Errorf("%d attempts for %d orders with %d retries; want one attempt per order and per retry",
			rep.attempts, rep.placed+rep.outOfStock, retries)
	}
}

// TestRun runs the program on each engine as a user would, on the servers
// of TXRETRY_PG_DSN and TXRETRY_MYSQL_DSN.
func TestRun(t *testing.T) {
	for _, e := range []dbserver.Engine{dbserver.Postgres, dbserver.MySQL} {
		t.Run(e.String(), func(t *testing.T) {
			srv := dbservertest.EnvServer(t, e)
			ns := dbservertest.Namespace(t, srv, "txretry_test_repository_run") // dropped when the test ends
			db := map[dbserver.Engine]string{dbserver.Postgres: "postgres", dbserver.MySQL: "mysql"}[e]
			var out bytes.Buffer
			status := run([]string{"-db", db, "-namespace", ns.Name,
				"-customers", "4", "-orders", "2", "-stock", "10"}, &out, &out)
			t.Log("\n" + out.String())
			if status != 0 || !strings.Contains(out.String(), "ok: the invariant holds on every run") {
				t.Errorf("run = %d, want 0 and the invariant to hold", status)
			}
			for _, d := range driversFor(e) {
				if !strings.Contains(out.String(), string(d)) {
					t.Errorf("the output does not show a run with %s", d)
				}
			}
		})
	}
}

// TestGeneratedCodeIsCurrent fails when sqlc.yaml, the schemas or the
// queries changed since the store packages were generated, or the
// generated code was edited: run make generate (needs sqlc, see gen.go).
func TestGeneratedCodeIsCurrent(t *testing.T) {
	if err := gensum.Check("."); err != nil {
		t.Fatal(err)
	}
}

// TestReportOK checks that the invariant and publish checks are not vacuous.
func TestReportOK(t *testing.T) {
	tests := []struct {
		name string
		rep  report
		want bool
	}{
		{"all units accounted for", report{stock: 10, finalStock: 4, ordered: 6, units: 6}, true},
		{"lost update", report{stock: 10, finalStock: 7, ordered: 6, units: 6}, false},
		{"oversold", report{stock: 10, finalStock: -2, ordered: 12, units: 12}, false},
		{"an order placed but not recorded", report{stock: 10, finalStock: 4, ordered: 6, units: 8}, false},
		{"every order published once", report{stock: 10, finalStock: 4, ordered: 6, units: 6,
			placedIDs: []int64{1, 2}, recordedIDs: []int64{2, 1}, events: []OrderPlaced{{Order: Order{ID: 2}}, {Order: Order{ID: 1}}}}, true},
		{"an order published twice", report{stock: 10, finalStock: 4, ordered: 6, units: 6,
			placedIDs: []int64{1}, recordedIDs: []int64{1}, events: []OrderPlaced{{Order: Order{ID: 1}}, {Order: Order{ID: 1}}}}, false},
		{"an event for an attempt rolled back", report{stock: 10, finalStock: 4, ordered: 6, units: 6,
			placedIDs: []int64{2}, recordedIDs: []int64{2}, events: []OrderPlaced{{Order: Order{ID: 1}}, {Order: Order{ID: 2}}}}, false},
		{"an order not published", report{stock: 10, finalStock: 4, ordered: 6, units: 6,
			placedIDs: []int64{1}, recordedIDs: []int64{1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rep.ok(); got != tt.want {
				t.Errorf("ok() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"bad isolation", []string{"-isolation", "snapshot"}, 2},
		{"bad database", []string{"-db", "oracle"}, 2},
		{"no customers", []string{"-customers", "0"}, 2},
		{"stray argument", []string{"go"}, 2},
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

func TestSetupStatements(t *testing.T) {
	for _, tt := range []struct {
		name, schema string
	}{{"postgresql", postgresSchema}, {"mysql", mysqlSchema}} {
		t.Run(tt.name, func(t *testing.T) {
			stmts := setupStatements(tt.schema)
			if len(stmts) != 4 || !strings.HasPrefix(stmts[2], "CREATE TABLE products") || !strings.HasPrefix(stmts[3], "CREATE TABLE orders") {
				t.Errorf("setupStatements = %q, want the two DROP and the two CREATE TABLE", stmts)
			}
		})
	}
}
