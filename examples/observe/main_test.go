package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/dbserver/dbservertest"
)

func TestMain(m *testing.M) { dbservertest.Main(m) }

// TestObserve runs the program's burst and checks that every signal it
// prints is there: log lines, spans of retried calls, and the metrics.
func TestObserve(t *testing.T) {
	srv := dbservertest.Server(t, dbserver.Postgres)
	ns := dbservertest.Namespace(t, srv, "txretry_test_observe")
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
		`"txretry.queue.duration"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %s", want)
		}
	}
	if retried {
		for _, want := range []string{
			`msg="txretry: retryable failure" label=increment`, `"Name":"txretry increment"`,
			`"txretry.attempt.failed"`, `"txretry.retries"`, `"Value":"40001"`, ` queued=`,
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %s", want)
			}
		}
		checkSpanTree(t, out.String())
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

// printedSpan is what the test reads of a span that stdouttrace printed.
type printedSpan struct {
	Name        string
	SpanContext struct{ SpanID string }
	Parent      struct{ SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

// checkSpanTree checks that each printed call span is preceded by one "fn"
// span per attempt, each a child of it.
func checkSpanTree(t *testing.T, out string) {
	t.Helper()
	children := map[string]int{}
	var calls int
	for line := range strings.Lines(out) {
		if !strings.HasPrefix(line, `{"Name":`) {
			continue
		}
		var s printedSpan
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("span %s: %v", line, err)
		}
		switch s.Name {
		case "fn":
			children[s.Parent.SpanID]++
		case "txretry increment":
			calls++
			var attempts float64
			for _, a := range s.Attributes {
				if a.Key == "txretry.attempts" {
					attempts, _ = a.Value.Value.(float64)
				}
			}
			if got := children[s.SpanContext.SpanID]; got != int(attempts) || attempts < 2 {
				t.Errorf("call span %s: txretry.attempts=%v and %d fn spans; want as many, and at least 2",
					s.SpanContext.SpanID, attempts, got)
			}
			delete(children, s.SpanContext.SpanID)
		default:
			t.Errorf("unexpected span %q", s.Name)
		}
	}
	if calls == 0 || len(children) != 0 {
		t.Errorf("%d call spans printed, %d fn spans without their call's", calls, len(children))
	}
}
