package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txretry/txretry/examples/internal/dbconn"
	"github.com/txretry/txretry/examples/internal/dbconntest"
)

func TestMain(m *testing.M) { dbconntest.Main(m) }

// TestObserve runs the program's burst and checks that every signal it
// prints is there: log lines, spans of retried calls, and the metrics.
func TestObserve(t *testing.T) {
	srv := dbconntest.Server(t, dbconn.Postgres)
	ns := dbconntest.Namespace(t, srv, "txretry_test_observe")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	sum, err := observe(ctx, ns, config{workers: 8, calls: 10}, &out)
	if err != nil {
		t.Fatalf("observe: %v\n%s", err, out.String())
	}
	if sum.calls != 80 || sum.committed != 80 || sum.counter != 80 {
		t.Errorf("summary %+v, want 80 calls, commits and increments", sum)
	}
	retried := sum.attempts > sum.calls
	for _, want := range []string{
		`"txretry.calls"`, `"txretry.call.attempts"`, `"txretry.call.duration"`, `"txretry.wait.duration"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %s", want)
		}
	}
	if retried {
		for _, want := range []string{
			`msg="txretry: retryable failure" label=increment`, `"Name":"txretry increment"`,
			`"txretry.attempt.failed"`, `"txretry.retries"`, `"Value":"40001"`,
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %s", want)
			}
		}
	}
	t.Logf("%d calls, %d attempts", sum.calls, sum.attempts)
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-workers", "0"}, {"-calls", "-1"}, {"extra"}} {
		var stderr bytes.Buffer
		if code := run(args, &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
	}
}
