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

// localServer is a throwaway server: its directory, and its process while
// it runs. A private one (see Private) may be halted and launched again on
// the same port.
type localServer struct {
	engine Engine
	bin    *binaries
	acct   *account
	// dir holds the data directory, the socket, the log and the owner file.
	dir string
	// data is the data directory (PgBouncer: none).
	data string
	// port is the TCP port the server listens on, on 127.0.0.1.
	port int
	// settings are extra PostgreSQL settings (name=value), given with -c.
	settings []string
	// standby is a PostgreSQL standby: it has no database to create.
	standby bool
	// bouncer is a PgBouncer in front of a PostgreSQL server; bin.server is
	// the pgbouncer program and dir holds its configuration.
	bouncer bool
	// cleanSig stops the server cleanly (fast shutdown); crashSig at once.
	cleanSig, crashSig syscall.Signal

	mu sync.Mutex
	// proc is the running server process, nil while halted.
	proc *process

	stopOnce sync.Once
	stopErr  error
}

// process is one run of a server program.
type process struct {
	cmd *exec.Cmd
	// exited is closed when the process has exited, after err is set.
	exited chan struct{}
	err    error
}

// newLocal returns the throwaway server of e from bin in a new directory
// under the temporary folder, not started yet; kind starts the directory's
// name ("pg-").
func newLocal(e Engine, bin *binaries, kind string) (*localServer, error) {
	acct, err := serverAccount(e)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", localDirPrefix+kind)
	if err != nil {
		return nil, err
	}
	l := &localServer{engine: e, bin: bin, acct: acct, dir: dir, data: filepath.Join(dir, "data"),
		cleanSig: syscall.SIGTERM, crashSig: syscall.SIGKILL}
	if e == Postgres {
		// What pg_ctl stop -m fast and -m immediate send.
		l.cleanSig, l.crashSig = syscall.SIGINT, syscall.SIGQUIT
	}
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	if acct != nil && acct.name != "root" {
		// MkdirTemp made dir 0700 and ours; the server writes there.
		if err := os.Chown(dir, int(acct.uid), int(acct.gid)); err != nil {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
	}
	return l, nil
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
	return runLocal(ctx, e, bin, e.EnvVar()+" is not set and Docker is not available; starting a throwaway", nil)
}

// runLocal creates and starts a throwaway server of e from bin with the
// extra PostgreSQL settings, within LocalTimeout; what begins the message
// it prints.
func runLocal(ctx context.Context, e Engine, bin *binaries, what string, settings []string) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, LocalTimeout)
	defer cancel()
	sweepStale()
	kind := "pg-"
	if e == MySQL {
		kind = "mysql-"
	}
	l, err := newLocal(e, bin, kind)
	if err != nil {
		return nil, err
	}
	l.settings = settings
	start := time.Now()
	fmt.Fprintf(os.Stderr, "dbserver: %s %s from %s in %s\n", what, e, filepath.Dir(bin.server), l.dir)
	dsn, err := l.start(ctx)
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

// start initializes the data directory, picks a free port, starts the
// server and waits until it answers; it returns the server's DSN.
func (l *localServer) start(ctx context.Context) (string, error) {
	args := l.initArgs()
	if out, err := l.run(ctx, args[0], args[1:]...); err != nil {
		return "", fmt.Errorf("%s: %w%s", filepath.Base(args[0]), err, tail(out))
	}
	var err error
	if l.port, err = freePort(); err != nil {
		return "", err
	}
	if err := l.launch(ctx, true); err != nil {
		return "", err
	}
	_, dsn := l.serverArgs()
	return dsn, nil
}

// launch starts the server process on l.port and waits until it answers,
// creating the database test when create is set.
func (l *localServer) launch(ctx context.Context, create bool) error {
	l.mu.Lock()
	running := l.proc != nil
	l.mu.Unlock()
	if running {
		return fmt.Errorf("throwaway %s is already running", l.engine)
	}
	args, _ := l.serverArgs()
	logPath := filepath.Join(l.dir, "server.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	p := &process{cmd: command(l.acct, l.dir, l.bin.server, args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		return err
	}
	l.mu.Lock()
	l.proc = p
	l.mu.Unlock()
	register(l)
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	if err := os.WriteFile(filepath.Join(l.dir, "server.pid"), []byte(strconv.Itoa(p.cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	if err := l.ready(ctx, p, create); err != nil {
		log, _ := os.ReadFile(logPath)
		return fmt.Errorf("%w%s", err, tail(log))
	}
	return nil
}

// pid returns the process id of the running server, or 0.
func (l *localServer) pid() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.proc == nil {
		return 0
	}
	return l.proc.cmd.Process.Pid
}

// halt sends sig to the running server and waits until it has exited
// (SIGKILL to its process group after stopTimeout); the data directory
// stays. It does nothing while the server is halted.
func (l *localServer) halt(sig syscall.Signal) error {
	l.mu.Lock()
	p := l.proc
	l.proc = nil
	l.mu.Unlock()
	if p == nil {
		return nil
	}
	var err error
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		err = fmt.Errorf("throwaway %s did not stop within %v: killed", l.engine, stopTimeout)
	}
	// Also ends any child the server left (PostgreSQL backends).
	killGroup(p.cmd.Process.Pid)
	<-p.exited
	return err
}

// initArgs returns the command line that creates the data directory.
func (l *localServer) initArgs() []string {
	var args []string
	switch {
	case l.engine == Postgres:
		return []string{l.bin.initdb, "-D", l.data, "-U", "postgres", "--auth=trust",
			"--encoding=UTF8", "--locale=C", "--no-sync"}
	case l.bin.mariadb:
		args = []string{l.bin.initdb, "--no-defaults", "--datadir=" + l.data,
			"--auth-root-authentication-method=normal", "--skip-test-db"}
	default:
		args = []string{l.bin.server, "--no-defaults", "--initialize-insecure", "--datadir=" + l.data}
	}
	if l.engine == MySQL {
		// The server's own temporary files: bootstraps started at once
		// in the shared temporary directory collide on a temporary
		// table's name and fail with "Unknown table 'mysql.tmp_user_sys'".
		args = append(args, "--tmpdir="+l.dir)
	}
	if l.acct != nil {
		args = append(args, "--user="+l.acct.name)
	}
	return args
}

// run runs a program as the server's account, in its directory, until it
// ends or ctx does; it returns the program's output.
func (l *localServer) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := command(l.acct, l.dir, name, args...)
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

// serverArgs returns the server's arguments and the DSN it answers on.
func (l *localServer) serverArgs() ([]string, string) {
	p := strconv.Itoa(l.port)
	pgDSN := "postgres://postgres@127.0.0.1:" + p + "/test?sslmode=disable"
	switch {
	case l.bouncer:
		return []string{filepath.Join(l.dir, "pgbouncer.ini")}, pgDSN
	case l.engine == Postgres:
		args := []string{"-D", l.data, "-p", p, "-h", "127.0.0.1", "-k", l.dir,
			"-c", "max_connections=300", "-c", "shared_buffers=64MB",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		}
		// Later settings override earlier ones.
		for _, s := range l.settings {
			args = append(args, "-c", s)
		}
		return args, pgDSN
	}
	args := []string{"--no-defaults", "--datadir=" + l.data, "--port=" + p, "--bind-address=127.0.0.1",
		"--socket=" + l.socket(), "--pid-file=" + filepath.Join(l.dir, "mysqld.pid"), "--tmpdir=" + l.dir,
		"--log-error=" + filepath.Join(l.dir, "server.log"), "--skip-name-resolve", "--skip-log-bin",
		"--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=2", "--max-connections=300"}
	if !l.bin.mariadb {
		args = append(args, "--mysqlx=OFF")
	}
	if l.acct != nil && l.acct.name == "root" {
		args = append(args, "--user=root")
	}
	return args, "root@tcp(127.0.0.1:" + p + ")/test"
}

// socket returns the MySQL-family server's Unix socket.
func (l *localServer) socket() string { return filepath.Join(l.dir, "mysqld.sock") }

// ready waits until the server of process p answers, then, when create is
// set, creates the database test (and, on the MySQL family, the account
// root@127.0.0.1 that TCP clients use: MySQL's --initialize-insecure makes
// only root@localhost).
func (l *localServer) ready(ctx context.Context, p *process, create bool) error {
	driver, admin, stmts := "pgx", "", []string{}
	switch {
	case l.bouncer:
		_, admin = l.serverArgs()
		admin += "&connect_timeout=2"
	case l.engine == Postgres:
		admin = "postgres://postgres@127.0.0.1:" + strconv.Itoa(l.port) + "/postgres?sslmode=disable&connect_timeout=2"
		stmts = []string{"CREATE DATABASE test"}
	default:
		driver, admin = "mysql", "root@unix("+l.socket()+")/?timeout=2s"
		stmts = []string{
			"CREATE DATABASE IF NOT EXISTS test",
			"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'",
			"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
		}
	}
	if !create {
		stmts = nil
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
		case <-p.exited:
			return fmt.Errorf("%s exited: %v", filepath.Base(l.bin.server), p.err)
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer: %w", filepath.Base(l.bin.server), err)
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

// stop stops the server cleanly (SIGINT, PostgreSQL's fast shutdown, or
// SIGTERM; SIGKILL to its process group after stopTimeout) and removes its
// directory. It is safe to call more than once.
func (l *localServer) stop() error {
	l.stopOnce.Do(func() {
		errs := []error{l.halt(l.cleanSig)}
		unregister(l)
		errs = append(errs, os.RemoveAll(l.dir))
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
