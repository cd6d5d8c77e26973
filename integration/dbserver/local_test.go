//go:build unix

package dbserver

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperMain is the test binary run as a program that starts throwaway
// servers the way Find does on a machine without DSN variables and
// without Docker. It prints "server <pid> <dir>" for each, then "ready",
// and then, by mode: "close" closes them and exits 0 (a normal end);
// "wait" waits to be killed by a signal.
func helperMain(mode string) int {
	r := resolver{
		getenv:    func(string) string { return "" },
		docker:    func(context.Context) error { return errors.New("no Docker in this test") },
		container: func(context.Context, Engine, containerSpec) (*Server, error) { panic("container without Docker") },
		binaries:  func(e Engine) (*binaries, error) { return findBinaries(e, searchDirs(e)) },
		local:     startLocal,
	}
	var srvs []*Server
	for _, e := range []Engine{Postgres, MySQL} {
		srv, err := r.find(context.Background(), e)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		srvs = append(srvs, srv)
		fmt.Println("server", srv.local.pid(), srv.local.dir)
	}
	fmt.Println("ready")
	if mode == "close" {
		var errs []error
		for _, s := range srvs {
			errs = append(errs, s.Close())
		}
		if err := errors.Join(errs...); err != nil {
			fmt.Println("error", err)
			return 1
		}
		return 0
	}
	time.Sleep(2 * time.Minute)
	return 3
}

// helperServer is a server the helper started.
type helperServer struct {
	pid int
	dir string
}

// startHelper runs the test binary as a helper in mode and returns it once
// it has printed ready, with the servers it started.
func startHelper(t *testing.T, mode string) (*exec.Cmd, []helperServer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"="+mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var srvs []helperServer
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "server":
			pid, _ := strconv.Atoi(f[1])
			srvs = append(srvs, helperServer{pid: pid, dir: f[2]})
		case len(f) > 0 && f[0] == "ready":
			go func() { _, _ = bufio.NewReader(out).WriteTo(os.Stdout) }()
			return cmd, srvs
		case len(f) > 0 && f[0] == "error":
			msg := sc.Text() // and the lines of output the error carries
			for sc.Scan() {
				msg += "\n" + sc.Text()
			}
			t.Fatalf("helper: %s", msg)
		}
	}
	t.Fatalf("helper ended before it was ready: %v", cmd.Wait())
	return nil, nil
}

// checkGone fails t unless every server's process and directory are gone
// within a few seconds.
func checkGone(t *testing.T, srvs []helperServer) {
	t.Helper()
	for _, s := range srvs {
		deadline := time.Now().Add(5 * time.Second)
		for alive(s.pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(s.pid) {
			t.Errorf("server process %d is still running", s.pid)
		}
		if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("server directory %s is still there (%v)", s.dir, err)
		}
	}
}

// checkRunning fails t unless every server runs, in its directory, and,
// as root, as its system account.
func checkRunning(t *testing.T, srvs []helperServer) {
	t.Helper()
	if len(srvs) != 2 {
		t.Fatalf("helper started %d servers, want 2", len(srvs))
	}
	for i, s := range srvs {
		if !alive(s.pid) {
			t.Errorf("server process %d is not running", s.pid)
		}
		if _, err := os.Stat(filepath.Join(s.dir, "data")); err != nil {
			t.Errorf("server data directory: %v", err)
		}
		if !strings.HasPrefix(s.dir, filepath.Join(os.TempDir(), localDirPrefix)) {
			t.Errorf("server directory %s is not under %s", s.dir, os.TempDir())
		}
		if os.Geteuid() == 0 && runtime.GOOS == "linux" {
			want := []string{"postgres", "mysql"}[i]
			if got := processUser(t, s.pid); got != want && !(want == "mysql" && noAccount(want)) {
				t.Errorf("server %d runs as %s, want %s", s.pid, got, want)
			}
		}
	}
}

// noAccount reports whether the account name is missing.
func noAccount(name string) bool {
	_, err := user.Lookup(name)
	return err != nil
}

// processUser returns the name of the account process pid runs as (Linux).
func processUser(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			if u, err := user.LookupId(f[1]); err == nil {
				return u.Username
			}
			return f[1]
		}
	}
	return "?"
}

// TestThrowawayGoneAfterNormalEnd checks that a program that closes its
// throwaway servers leaves no process and no directory behind. It runs
// beside the other tests that start servers: most of a start is waiting.
func TestThrowawayGoneAfterNormalEnd(t *testing.T) {
	t.Parallel()
	cmd, srvs := startHelper(t, "close")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	if len(srvs) != 2 {
		t.Fatalf("helper started %d servers, want 2", len(srvs))
	}
	checkGone(t, srvs)
}

// TestThrowawayGoneAfterSignal interrupts a program while its throwaway
// servers run, as Ctrl-C or a CI cancel would: the servers must be stopped
// and their directories removed, and the program must still end by the
// signal.
func TestThrowawayGoneAfterSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, srvs := startHelper(t, "wait")
			checkRunning(t, srvs)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			ee, ok := errors.AsType[*exec.ExitError](err)
			if !ok {
				t.Fatalf("helper ended with %v, want the signal", err)
			}
			if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != sig {
				t.Errorf("helper ended with %v, want killed by %v", err, sig)
			}
			checkGone(t, srvs)
		})
	}
}

// TestThrowawayAfterKill kills the program with SIGKILL, which it cannot
// catch: on Linux its servers die with it, and the next start removes
// their directories.
func TestThrowawayAfterKill(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("servers die with their program only on Linux (PR_SET_PDEATHSIG)")
	}
	cmd, srvs := startHelper(t, "wait")
	checkRunning(t, srvs)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, s := range srvs {
		deadline := time.Now().Add(5 * time.Second)
		for alive(s.pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	sweepStale()
	checkGone(t, srvs)
}

// TestThrowawayServers uses the throwaway servers as the tests use any
// server: a database of their own, a namespace, and the DSN's form.
func TestThrowawayServers(t *testing.T) {
	t.Parallel()
	for _, e := range []Engine{Postgres, MySQL} {
		t.Run(e.String(), func(t *testing.T) {
			t.Parallel()
			srv := throwaway(t, e)
			if srv.Source != "throwaway server" || srv.Path() != "throwaway" || !strings.Contains(srv.String(), "(throwaway server)") {
				t.Errorf("Source %q, String %q", srv.Source, srv)
			}
			if !strings.Contains(srv.DSN, "127.0.0.1:") || strings.Contains(srv.DSN, ":5432") || strings.Contains(srv.DSN, ":3306") {
				t.Errorf("DSN %q: want a free loopback port, never the default one", srv.DSN)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			name := DatabaseName(e, t.Name())
			dsn, err := srv.CreateDatabase(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			db, err := sql.Open(e.Driver(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
				t.Error(err)
			}
			if err := db.Close(); err != nil {
				t.Error(err)
			}
			if err := srv.DropDatabase(ctx, name); err != nil {
				t.Error(err)
			}
			ns, err := srv.Namespace(ctx, "txretry_test_dbserver")
			if err != nil {
				t.Fatal(err)
			}
			if ns.Prefix != "" {
				t.Errorf("namespace %s: a superuser needs no prefix", ns.Where)
			}
			if err := ns.Drop(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}
