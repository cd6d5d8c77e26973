package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildWithdb builds the command into a temporary directory.
func buildWithdb(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "withdb")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// withdb runs the built command with env added to an environment without
// the DSN variables.
func withdb(bin string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TXRETRY_PG_DSN=") && !strings.HasPrefix(kv, "TXRETRY_MYSQL_DSN=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// TestWithdb checks that the command gets the DSNs of servers withdb
// started, that its exit status is withdb's, that a set-but-dead DSN stops
// withdb before the command runs, and that the throwaway servers are gone
// afterwards.
func TestWithdb(t *testing.T) {
	bin := buildWithdb(t)
	started := checkStartedGone(t)

	t.Run("exports the DSNs and returns the command's status", func(t *testing.T) {
		var out, stderr bytes.Buffer
		cmd := withdb(bin, nil, "--", "sh", "-c", `echo "pg=$TXRETRY_PG_DSN"; echo "my=$TXRETRY_MYSQL_DSN"; exit 7`)
		cmd.Stdout, cmd.Stderr = &out, &stderr
		err := cmd.Run()
		*started = append(*started, dirsIn(stderr.String())...)
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
			t.Errorf("withdb: %v, want exit status 7\n%s", err, stderr.String())
		}
		// A container's DSN carries its password, a throwaway server's none.
		for _, want := range []string{`pg=postgres://postgres(:[^@]*)?@127\.0\.0\.1:`, `my=root(:[^@]*)?@tcp\(127\.0\.0\.1:`} {
			if !regexp.MustCompile(want).MatchString(out.String()) {
				t.Errorf("command output %q does not match %q\n%s", out.String(), want, stderr.String())
			}
		}
		if strings.Contains(out.String(), ":5432/") || strings.Contains(out.String(), ":3306)") {
			t.Errorf("command got a default port: %s", out.String())
		}
	})

	t.Run("set but dead DSN is an error", func(t *testing.T) {
		var out, stderr bytes.Buffer
		cmd := withdb(bin, []string{"TXRETRY_PG_DSN=postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=1"},
			"--", "echo", "ran")
		cmd.Stdout, cmd.Stderr = &out, &stderr
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("withdb: %v, want exit status 1", err)
		}
		if out.String() != "" || !strings.Contains(stderr.String(), "TXRETRY_PG_DSN is set but its server does not answer") {
			t.Errorf("stdout %q, stderr %q: want the command not run and the reason", out.String(), stderr.String())
		}
	})
}

// TestWithdbSIGTERM checks that SIGTERM reaches the command, that withdb
// exits with the command's status, and that the throwaway servers are gone
// afterwards. make test leaves it to make test-all, with dbserver's own
// tests of signals.
func TestWithdbSIGTERM(t *testing.T) {
	bin := buildWithdb(t)
	started := checkStartedGone(t)
	var stderr bytes.Buffer
	cmd := withdb(bin, nil, "--", "sh", "-c", `trap 'exit 5' TERM; echo ready; while :; do sleep 0.1; done`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("read %q, %v\n%s", buf, err, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	*started = append(*started, dirsIn(stderr.String())...)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 {
		t.Errorf("withdb: %v, want the command's exit status 5\n%s", err, stderr.String())
	}
}

// checkStartedGone returns where to record the directories of the
// throwaway servers withdb started, from its messages (other test binaries
// may start some of their own meanwhile), and checks when t ends that
// there is one at least and that all are gone.
func checkStartedGone(t *testing.T) *[]string {
	started := new([]string)
	t.Cleanup(func() {
		if len(*started) == 0 {
			t.Error("withdb started no throwaway server")
		}
		checkGone(t, *started)
	})
	return started
}

// dirRE matches the directory in dbserver's "starting a throwaway" message.
var dirRE = regexp.MustCompile(`starting a throwaway \S+ from \S+ in (\S+)`)

// dirsIn returns the directories of the throwaway servers withdb's
// messages say it started.
func dirsIn(stderr string) []string {
	if strings.Contains(stderr, "container path") {
		return []string{containerPath} // withdb took the container path: no directory
	}
	var dirs []string
	for _, m := range dirRE.FindAllStringSubmatch(stderr, -1) {
		dirs = append(dirs, m[1])
	}
	return dirs
}

// containerPath stands in dirsIn's answer for the servers of withdb's
// container path (Docker answering), which leave no directory.
const containerPath = "(container path)"

// checkGone fails t unless every directory is gone within a few seconds
// (withdb has exited: stopping is done).
func checkGone(t *testing.T, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		if d == containerPath {
			continue
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := os.Stat(d)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("throwaway server directory %s is still there", d)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
