package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/dbserver/dbservertest"
)

func TestMain(m *testing.M) { dbservertest.Main(m) }

// TestDemo places concurrent orders under SERIALIZABLE and REPEATABLE READ
// and asserts that no unit is lost or oversold.
func TestDemo(t *testing.T) {
	srv := dbservertest.Server(t, dbserver.Postgres)
	ns := dbservertest.Namespace(t, srv, "txretry_test_repository")
	for _, isolation := range []string{"serializable", "repeatable-read"} {
		t.Run(isolation, func(t *testing.T) {
			o, err := parseFlags([]string{"-namespace", ns.Name, "-isolation", isolation,
				"-customers", "8", "-orders", "4", "-stock", "40"}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep, err := demo(ctx, srv, o)
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
			if rep.placed == 0 || rep.attempts < rep.placed {
				t.Errorf("placed %d orders in %d attempts", rep.placed, rep.attempts)
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
