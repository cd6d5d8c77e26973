package dbserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// envHelper makes the test binary a helper program (see helperMain) instead
// of running the tests.
const envHelper = "DBSERVER_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(envHelper); mode != "" {
		os.Exit(helperMain(mode))
	}
	code := m.Run()
	if err := closeLocals(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	if code == 0 {
		// The signal watcher of the throwaway servers must be gone with
		// them, as must every pool the tests opened.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// started are the throwaway servers of the test binary, one per engine,
// started on first use whatever the environment says: the path of a
// machine without DSN variables and without Docker is tested everywhere,
// CI included.
var started struct {
	mu   sync.Mutex
	srvs map[Engine]*startResult
}

type startResult struct {
	once    sync.Once
	srv     *Server
	elapsed time.Duration
	err     error
}

// throwaway returns the test binary's throwaway server of e. It fails the
// test when the binaries are missing: they are what make test needs on a
// machine without Docker, and CI has them.
func throwaway(t *testing.T, e Engine) *Server {
	t.Helper()
	started.mu.Lock()
	if started.srvs == nil {
		started.srvs = make(map[Engine]*startResult)
	}
	r := started.srvs[e]
	if r == nil {
		r = &startResult{}
		started.srvs[e] = r
	}
	started.mu.Unlock()
	r.once.Do(func() {
		bin, err := findBinaries(e, searchDirs(e))
		if err != nil {
			r.err = err
			return
		}
		begin := time.Now()
		r.srv, r.err = startLocal(context.Background(), e, bin)
		r.elapsed = time.Since(begin)
		if r.err == nil {
			r.err = r.srv.probe(context.Background())
		}
	})
	if r.err != nil {
		t.Fatalf("throwaway %s: %v", e, r.err)
	}
	t.Logf("throwaway %s started in %v", r.srv, r.elapsed.Round(time.Millisecond))
	return r.srv
}

// closeLocals stops the throwaway servers the tests started.
func closeLocals() error {
	started.mu.Lock()
	defer started.mu.Unlock()
	var errs []error
	for _, r := range started.srvs {
		if r.srv != nil {
			errs = append(errs, r.srv.Close())
		}
	}
	started.srvs = nil
	return errors.Join(errs...)
}
