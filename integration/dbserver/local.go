//go:build unix

package dbserver

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Throwaway servers from installed binaries.

// localDirPrefix starts the name of every throwaway server's directory
// under os.TempDir().
const localDirPrefix = "txretry-dbserver-"

// stopTimeout bounds a throwaway server's clean shutdown, after which it is
// killed.
const stopTimeout = 15 * time.Second

// localServer is a running throwaway server.
type localServer struct {
	engine Engine
	// dir holds the data directory, the socket, the log and the owner file.
	dir string
	cmd *exec.Cmd
	// port is the TCP port the server listens on, on 127.0.0.1.
	port int
	// exited is closed when the server process has exited.
	exited   chan struct{}
	waitErr  error
	stopOnce sync.Once
	stopErr  error
}

// account is the system account a server runs as when we are root.
type account struct {
	name     string
	uid, gid uint32
}

// serverAccount returns the account e's server must run as: nil when we
// are not root (the server runs as we do); the postgres or mysql account
// as root, since PostgreSQL refuses to run as root and MariaDB wants
// --user. MySQL-family servers run as root, with --user=root, when there is
// no mysql account.
func serverAccount(e Engine) (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	name := "postgres"
	if e == MySQL {
		name = "mysql"
	}
	u, err := user.Lookup(name)
	if err != nil {
		if e == MySQL {
			return &account{name: "root"}, nil
		}
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses to run as root, but the %s account it would run as is missing (%w): create it (useradd --system %s) or run as another user", name, errNoAccount, name)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("account %s: %w", name, err)
	}
	return &account{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
}

// command returns cmd for a program that runs as acct (when not nil), in
// its own process group (a Ctrl-C in the terminal reaches the program that
// started it, which stops it cleanly) and, on Linux, killed when the
// program that started it dies.
func command(acct *account, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	if acct != nil && acct.name != "root" {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: acct.uid, Gid: acct.gid, NoSetGroups: true}
	}
	return cmd
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// startLocal starts a throwaway server of e from bin, within LocalTimeout.
func startLocal(ctx context.Context, e Engine, bin *binaries) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, LocalTimeout)
	defer cancel()
	sweepStale()
	acct, err := serverAccount(e)
	if err != nil {
		return nil, err
	}
	kind := "pg-"
	if e == MySQL {
		kind = "mysql-"
	}
	dir, err := os.MkdirTemp("", localDirPrefix+kind)
	if err != nil {
		return nil, err
	}
	l := &localServer{engine: e, dir: dir, exited: make(chan struct{})}
	start := time.Now()
	fmt.Fprintf(os.Stderr, "dbserver: %s is not set and Docker is not available; starting a throwaway %s from %s in %s\n",
		e.EnvVar(), e, filepath.Dir(bin.server), dir)
	dsn, err := l.start(ctx, bin, acct)
	if err != nil {
		return nil, errors.Join(err, l.stop())
	}
	fmt.Fprintf(os.Stderr, "dbserver: throwaway %s ready on %s in %.1fs\n", e, l.addr(dsn), time.Since(start).Seconds())
	return &Server{Engine: e, DSN: dsn, Source: "throwaway server", local: l}, nil
}

// addr returns host:port of dsn, for messages.
func (l *localServer) addr(dsn string) string {
	if l.engine == Postgres {
		if u, err := parseURL(dsn); err == nil {
			return u.Host
		}
		return "?"
	}
	_, rest, _ := strings.Cut(dsn, "tcp(")
	addr, _, _ := strings.Cut(rest, ")")
	return addr
}

// start initializes the data directory, starts the server and waits until
// it answers; it returns the server's DSN.
func (l *localServer) start(ctx context.Context, bin *binaries, acct *account) (string, error) {
	if err := os.WriteFile(filepath.Join(l.dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return "", err
	}
	if acct != nil && acct.name != "root" {
		// MkdirTemp made dir 0700 and ours; the server writes there.
		if err := os.Chown(l.dir, int(acct.uid), int(acct.gid)); err != nil {
			return "", err
		}
	}
	data := filepath.Join(l.dir, "data")
	if out, err := l.initdb(ctx, bin, acct, data); err != nil {
		return "", fmt.Errorf("%s: %w%s", filepath.Base(l.initArgs(bin)[0]), err, tail(out))
	}
	var err error
	if l.port, err = freePort(); err != nil {
		return "", err
	}
	args, dsn := l.serverArgs(bin, acct, data, l.port)
	logPath := filepath.Join(l.dir, "server.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", err
	}
	defer logFile.Close()
	l.cmd = command(acct, l.dir, bin.server, args...)
	l.cmd.Stdout, l.cmd.Stderr = logFile, logFile
	if err := l.cmd.Start(); err != nil {
		close(l.exited)
		return "", err
	}
	register(l)
	go func() {
		l.waitErr = l.cmd.Wait()
		close(l.exited)
	}()
	if err := os.WriteFile(filepath.Join(l.dir, "server.pid"), []byte(strconv.Itoa(l.cmd.Process.Pid)), 0o644); err != nil {
		return "", err
	}
	if err := l.ready(ctx, bin); err != nil {
		log, _ := os.ReadFile(logPath)
		return "", fmt.Errorf("%w%s", err, tail(log))
	}
	return dsn, nil
}

// initArgs returns the command line that creates the data directory.
func (l *localServer) initArgs(bin *binaries) []string {
	data := filepath.Join(l.dir, "data")
	switch {
	case l.engine == Postgres:
		return []string{bin.initdb, "-D", data, "-U", "postgres", "--auth=trust",
			"--encoding=UTF8", "--locale=C", "--no-sync"}
	case bin.mariadb:
		return []string{bin.initdb, "--no-defaults", "--datadir=" + data,
			"--auth-root-authentication-method=normal", "--skip-test-db"}
	default:
		return []string{bin.server, "--no-defaults", "--initialize-insecure", "--datadir=" + data}
	}
}

// initdb creates the data directory and returns the program's output.
func (l *localServer) initdb(ctx context.Context, bin *binaries, acct *account, data string) ([]byte, error) {
	args := l.initArgs(bin)
	if l.engine == MySQL && acct != nil {
		args = append(args, "--user="+acct.name)
	}
	cmd := command(acct, l.dir, args[0], args[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-ctx.Done():
		killGroup(cmd.Process.Pid)
		<-done
		return out.Bytes(), ctx.Err()
	}
}

// serverArgs returns the server's arguments and the DSN it will answer on.
func (l *localServer) serverArgs(bin *binaries, acct *account, data string, port int) ([]string, string) {
	p := strconv.Itoa(port)
	if l.engine == Postgres {
		return []string{"-D", data, "-p", p, "-h", "127.0.0.1", "-k", l.dir,
			"-c", "max_connections=300", "-c", "shared_buffers=64MB",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		}, "postgres://postgres@127.0.0.1:" + p + "/test?sslmode=disable"
	}
	args := []string{"--no-defaults", "--datadir=" + data, "--port=" + p, "--bind-address=127.0.0.1",
		"--socket=" + l.socket(), "--pid-file=" + filepath.Join(l.dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(l.dir, "server.log"), "--skip-name-resolve", "--skip-log-bin",
		"--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=2", "--max-connections=300"}
	if !bin.mariadb {
		args = append(args, "--mysqlx=OFF")
	}
	if acct != nil && acct.name == "root" {
		args = append(args, "--user=root")
	}
	return args, "root@tcp(127.0.0.1:" + p + ")/test"
}

// socket returns the MySQL-family server's Unix socket.
func (l *localServer) socket() string { return filepath.Join(l.dir, "mysqld.sock") }

// ready waits until the server answers, then creates the database test
// (and, on the MySQL family, the account root@127.0.0.1 that TCP clients
// use: MySQL's --initialize-insecure makes only root@localhost).
func (l *localServer) ready(ctx context.Context, bin *binaries) error {
	driver, admin, stmts := "pgx", "", []string{}
	if l.engine == Postgres {
		admin = "postgres://postgres@127.0.0.1:" + strconv.Itoa(l.port) + "/postgres?sslmode=disable&connect_timeout=2"
		stmts = []string{"CREATE DATABASE test"}
	} else {
		driver, admin = "mysql", "root@unix("+l.socket()+")/?timeout=2s"
		stmts = []string{
			"CREATE DATABASE IF NOT EXISTS test",
			"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'",
			"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
		}
	}
	db, err := sql.Open(driver, admin)
	if err != nil {
		return err
	}
	defer db.Close()
	for {
		err := db.PingContext(ctx)
		if err == nil {
			break
		}
		select {
		case <-l.exited:
			return fmt.Errorf("%s exited: %v", filepath.Base(bin.server), l.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer: %w", filepath.Base(bin.server), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// stop stops the server (SIGINT, PostgreSQL's fast shutdown, or SIGTERM;
// SIGKILL to its process group after stopTimeout) and removes its
// directory. It is safe to call more than once.
func (l *localServer) stop() error {
	l.stopOnce.Do(func() {
		var errs []error
		if l.cmd != nil && l.cmd.Process != nil {
			sig := syscall.SIGTERM
			if l.engine == Postgres {
				sig = syscall.SIGINT
			}
			_ = l.cmd.Process.Signal(sig)
			select {
			case <-l.exited:
			case <-time.After(stopTimeout):
				errs = append(errs, fmt.Errorf("throwaway %s did not stop within %v: killed", l.engine, stopTimeout))
			}
			// Also ends any child the server left (PostgreSQL backends).
			killGroup(l.cmd.Process.Pid)
			<-l.exited
			unregister(l)
		}
		if err := os.RemoveAll(l.dir); err != nil {
			errs = append(errs, err)
		}
		l.stopErr = errors.Join(errs...)
	})
	return l.stopErr
}

// killGroup sends SIGKILL to the process group pid leads.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }

// tail returns the last lines of out, indented, for an error message.
func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return ""
	}
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return "\n\t" + strings.Join(lines, "\n\t")
}

// sweepStale removes the directories of throwaway servers whose program
// died without stopping them (SIGKILL: on Linux the server died with it)
// and whose server is gone too. A directory without an owner file is being
// created by another program, unless it is old.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), localDirPrefix+"*"))
	for _, d := range dirs {
		owner := readPid(filepath.Join(d, "owner"))
		if owner == 0 {
			if fi, err := os.Stat(d); err != nil || time.Since(fi.ModTime()) < 10*time.Minute {
				continue
			}
		}
		if !alive(owner) && !alive(readPid(filepath.Join(d, "server.pid"))) {
			_ = os.RemoveAll(d)
		}
	}
}

// readPid returns the process id in file, or 0.
func readPid(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
