package dbconntest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/txretry/txretry/examples/internal/dbconn"
)

// cleanupTimeout bounds dropping a test's namespace.
const cleanupTimeout = 30 * time.Second

// servers holds the server of each engine, resolved once per test binary.
var servers struct {
	mu   sync.Mutex
	byE  map[dbconn.Engine]*lookup
	used []*dbconn.Server
}

// lookup is the cached result of dbconn.Find for one engine.
type lookup struct {
	once sync.Once
	srv  *dbconn.Server
	err  error
}

// Server returns the server of engine e, resolved on first use and shared by
// the whole test binary. When none is available it skips t, or fails it
// under CI=true or when e's DSN variable is set but does not work.
func Server(t testing.TB, e dbconn.Engine) *dbconn.Server {
	t.Helper()
	servers.mu.Lock()
	if servers.byE == nil {
		servers.byE = make(map[dbconn.Engine]*lookup)
	}
	l := servers.byE[e]
	if l == nil {
		l = &lookup{}
		servers.byE[e] = l
	}
	servers.mu.Unlock()

	l.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dbconn.ContainerTimeout+time.Minute)
		defer cancel()
		l.srv, l.err = dbconn.Find(ctx, e)
		if l.srv != nil {
			servers.mu.Lock()
			servers.used = append(servers.used, l.srv)
			servers.mu.Unlock()
		}
	})
	if l.err != nil {
		ue, _ := errors.AsType[*dbconn.UnavailableError](l.err)
		if ciEnabled() || (ue != nil && ue.Configured) {
			t.Fatalf("%v", l.err)
		}
		t.Skipf("%v", l.err)
	}
	return l.srv
}

// EnvServer is Server for a test that runs a program as a user would, the
// program finding its servers itself: it skips t when e's server is a
// container (it does not come from e's DSN variable), since the program would
// start a container of its own.
func EnvServer(t testing.TB, e dbconn.Engine) *dbconn.Server {
	t.Helper()
	srv := Server(t, e)
	if srv.Source != e.EnvVar() {
		t.Skipf("%s is a container; the program would start another one", e)
	}
	return srv
}

// Namespace returns a fresh namespace called name on srv, dropped when t
// ends (also before, in case an earlier run left it behind).
func Namespace(t testing.TB, srv *dbconn.Server, name string) dbconn.Namespace {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	ns, err := srv.Namespace(ctx, name)
	if err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
	if err := ns.Drop(ctx); err != nil {
		t.Fatalf("drop leftover namespace %s: %v", name, err)
	}
	if ns, err = srv.Namespace(ctx, name); err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := ns.Drop(ctx); err != nil {
			t.Errorf("drop namespace %s: %v", name, err)
		}
	})
	return ns
}

// ciEnabled reports whether CI holds a true value ("true", "1", ...).
func ciEnabled() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// Main runs the tests, terminates the containers they started and checks
// that no goroutine was leaked (when no container was started: the Docker
// client keeps goroutines of its own). It exits with the tests' status, or 1
// if they passed but cleanup or the leak check failed.
func Main(m *testing.M) {
	code := m.Run()
	servers.mu.Lock()
	used := servers.used
	servers.mu.Unlock()

	containers := false
	var errs []error
	for _, s := range used {
		containers = containers || s.Source != s.Engine.EnvVar()
		errs = append(errs, s.Close())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "dbconntest: %v\n", err)
		code = max(code, 1)
	}
	if code == 0 && !containers {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "dbconntest: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
