package engines

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/txretry"
)

func TestMain(m *testing.M) { dbservertest.Main(m) }

// Environment variables written by the integration/cluster scripts.
const (
	envGaleraDSNs   = "TXRETRY_GALERA_DSNS"
	envPgBouncerDSN = "TXRETRY_PGBOUNCER_DSN"
	envTiDBDSN      = "TXRETRY_TIDB_DSN"
	// envTiDBStatus is the host:port of TiDB's status API.
	envTiDBStatus = "TXRETRY_TIDB_STATUS"
)

// requireEnv returns the value of env. If it is unset the test is skipped,
// or fails under CI=true, where every engine test must run.
func requireEnv(t *testing.T, env, script string) string {
	t.Helper()
	v := os.Getenv(env)
	if v != "" {
		return v
	}
	unavailable(t, fmt.Sprintf("%s is not set: make test-all starts integration/cluster/%s (see withdb's message for why it did not), or run it by hand and source integration/cluster/.run/env", env, script))
	return ""
}

// unavailable skips the test, or fails it under CI=true (any true value of
// strconv.ParseBool), where every engine test must run.
func unavailable(t *testing.T, msg string) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal(msg + " (CI=true: failing instead of skipping)")
	}
	t.Skip(msg)
}

// checkLeaks fails the test if goroutines started after this call outlive
// the test's cleanups registered after it.
func checkLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dbName returns a database name for the test: txr_<test name>_<random>,
// sanitized and short enough for MySQL's 64-character limit.
func dbName(t *testing.T) string {
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 40 {
		name = name[:40]
	}
	return "txr_" + name + "_" + randomHex(4)
}

// counter is an observer that counts failed attempts by error code, class
// and type, verifications by result, and outcomes; it keeps the number of
// attempts of the last call.
type counter struct {
	mu            sync.Mutex
	failedByCode  map[string]int
	failedByClass map[txretry.Class]int
	verified      map[txretry.Verification]int
	outcomes      map[txretry.Outcome]int
	failedByType  map[string]int
	lastAttempts  int
}

func newCounter() *counter {
	return &counter{
		failedByCode:  map[string]int{},
		failedByClass: map[txretry.Class]int{},
		failedByType:  map[string]int{},
		verified:      map[txretry.Verification]int{},
		outcomes:      map[txretry.Outcome]int{},
	}
}

// Observe implements txretry.Observer.
func (c *counter) Observe(_ context.Context, e txretry.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.Kind {
	case txretry.AttemptFailed:
		c.failedByCode[e.Code]++
		c.failedByType[e.ErrType]++
		c.failedByClass[e.Class]++
	case txretry.CommitVerified:
		c.verified[e.Verification]++
	case txretry.CallFinished:
		c.outcomes[e.Outcome]++
		c.lastAttempts = e.Attempts
	}
}

func (c *counter) failed(code string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failedByCode[code]
}

func (c *counter) verifications(v txretry.Verification) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.verified[v]
}

// attempts returns the number of attempts of the last call that finished.
func (c *counter) attempts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastAttempts
}

func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("failed attempts by code %v, by class %v, by type %v; verifications %v; outcomes %v",
		c.failedByCode, c.failedByClass, c.failedByType, c.verified, c.outcomes)
}

// errChain renders err with the types of every error in its tree, for
// failure messages.
func errChain(err error) string {
	var types []string
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		types = append(types, fmt.Sprintf("%T", e))
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	return fmt.Sprintf("%v [%s]", err, strings.Join(types, " "))
}
