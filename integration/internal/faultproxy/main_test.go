package faultproxy

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// No goroutine is ignored: every proxy, pool and connection opened by
	// the tests is closed, and pgx's asynchronous close (which sends the
	// CancelRequest) is awaited through PgConn.CleanupDone.
	goleak.VerifyTestMain(m)
}

// Environment variables naming the servers the integration tests use.
const (
	envPostgresDSN = "TXRETRY_PG_DSN"
	envMySQLDSN    = "TXRETRY_MYSQL_DSN"
)

// dsnFromEnv returns the DSN in env. If it is unset the test is skipped, or
// fails when running under CI=true.
func dsnFromEnv(t *testing.T, env, example string) string {
	t.Helper()
	dsn := os.Getenv(env)
	if dsn == "" {
		unavailable(t, fmt.Sprintf("%s is not set; set it to run this test, e.g. %s='%s'", env, env, example))
	}
	return dsn
}

// unavailable skips the test, or fails it under CI=true (any true value of
// strconv.ParseBool) where every database test must run.
func unavailable(t *testing.T, msg string) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// startProxy starts a proxy closed at the end of the test.
func startProxy(t *testing.T, upstream string, proto Protocol) *Proxy {
	t.Helper()
	p, err := Start(upstream, proto)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

var lastID atomic.Int64

// nextID returns a row id unique within the test binary (tables are unique
// per run).
func nextID() int64 { return lastID.Add(1) }

// tableName returns a table name unique to this run.
func tableName(prefix string) string {
	return fmt.Sprintf("faultproxy_%s_%d", prefix, time.Now().UnixNano())
}

// describeErr renders err and every error it wraps, each with its type, for
// the test log.
func describeErr(err error) string {
	var parts []string
	for err != nil {
		parts = append(parts, fmt.Sprintf("%T(%q)", err, err.Error()))
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			if len(errs) == 0 {
				err = nil
			} else {
				err = errs[0]
			}
		default:
			err = errors.Unwrap(err)
		}
	}
	return strings.Join(parts, " -> ")
}

// client runs transactions through a proxy with one driver.
type client struct {
	// commitRow begins a transaction, inserts id and commits. A positive
	// timeout bounds the commit. It returns the commit's error; any other
	// error fails the test.
	commitRow func(t *testing.T, id int64, timeout time.Duration) error
	// exists reports, over a direct connection, whether row id exists.
	exists func(t *testing.T, id int64) bool
	// classify describes driver-specific facts about a commit error for
	// the test log; nil means none.
	classify func(err error) string
}

// errorLog collects the distinct commit errors of a test case.
type errorLog map[string]int

func (l errorLog) add(cl client, err error) {
	d := describeErr(err)
	if cl.classify != nil {
		d += " [" + cl.classify(err) + "]"
	}
	l[d]++
}

func (l errorLog) log(t *testing.T, what string) {
	t.Helper()
	for _, d := range slices.Sorted(maps.Keys(l)) {
		t.Logf("%s: %d× %s", what, l[d], d)
	}
}

const stallTimeout = 300 * time.Millisecond

// Each drop fault is repeated on each client: 5 times in make test, 20
// under TXRETRY_LONG (make test-all). A drop is deterministic: the further
// repetitions look for races in the proxy, a harness, not in the library.
const (
	shortDropRepetitions = 5
	longDropRepetitions  = 20
)

// dropRepetitions returns the repetitions of each drop fault.
func dropRepetitions() int {
	if long, _ := strconv.ParseBool(os.Getenv("TXRETRY_LONG")); long {
		return longDropRepetitions
	}
	return shortDropRepetitions
}

// runFaultCases checks every fault kind against cl.
func runFaultCases(t *testing.T, p *Proxy, cl client) {
	t.Run("none", func(t *testing.T) {
		id := nextID()
		p.Arm(None)
		if err := cl.commitRow(t, id, 0); err != nil {
			t.Fatalf("commit without fault: %v", err)
		}
		if !cl.exists(t, id) {
			t.Fatal("row missing after a commit without fault")
		}
	})

	cases := []struct {
		fault     Fault
		committed bool
	}{
		{fault: DropBeforeCommit, committed: false},
		{fault: DropAfterCommit, committed: true},
		{fault: DropMidReply, committed: true},
	}
	for _, tc := range cases {
		t.Run(tc.fault.String(), func(t *testing.T) {
			before := p.Stats().Faults[tc.fault]
			errs := errorLog{}
			defer errs.log(t, tc.fault.String()+": commit error")
			reps := dropRepetitions()
			for i := range reps {
				id := nextID()
				p.Arm(tc.fault)
				err := cl.commitRow(t, id, 0)
				if err == nil {
					t.Fatalf("repetition %d: commit returned no error", i)
				}
				errs.add(cl, err)
				if got := cl.exists(t, id); got != tc.committed {
					t.Fatalf("repetition %d: row exists = %v, want %v", i, got, tc.committed)
				}
			}
			if got := p.Stats().Faults[tc.fault] - before; got != reps {
				t.Errorf("Stats().Faults[%s] grew by %d, want %d", tc.fault, got, reps)
			}
		})
	}

	t.Run("StallReply", func(t *testing.T) {
		id := nextID()
		p.Arm(StallReply)
		start := time.Now()
		err := cl.commitRow(t, id, stallTimeout)
		if err == nil {
			t.Fatal("stalled commit returned no error")
		}
		errs := errorLog{}
		errs.add(cl, err)
		errs.log(t, fmt.Sprintf("StallReply: commit error after %v", time.Since(start).Round(time.Millisecond)))
		p.Release()
		// The COMMIT was forwarded, so the server committed.
		waitFor(t, "stalled row to exist", func() bool { return cl.exists(t, id) })

		id = nextID()
		if err := cl.commitRow(t, id, 0); err != nil {
			t.Fatalf("commit after Release: %v", err)
		}
		if !cl.exists(t, id) {
			t.Fatal("row missing after Release")
		}
	})
}

// waitFor polls cond for up to 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
