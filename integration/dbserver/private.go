//go:build unix

package dbserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Private is a throwaway server started for one caller alone, from the
// installed binaries, whatever the environment says (never a DSN's server,
// never a container): a test may stop it, kill it and start it again on the
// same port, which it must never do to a shared server. Its DSN (the
// embedded Server's) names the database test as the superuser, without a
// password. Close stops it and removes its directory, as for the throwaway
// servers of Find (SIGINT, SIGTERM and SIGHUP included).
//
// A private PostgreSQL server runs with synchronous_commit=on, so that no
// acknowledged commit is lost when it is killed and a synchronous standby
// (StartStandby) is waited for.
type Private struct {
	*Server
	l *localServer
}

// privateSettings are the settings of a private PostgreSQL server.
var privateSettings = []string{"synchronous_commit=on"}

// StartPrivate starts a private server of e from the installed binaries
// (found as for Find), within LocalTimeout. Missing binaries give an
// *UnavailableError.
func StartPrivate(ctx context.Context, e Engine) (*Private, error) {
	bin, err := findBinaries(e, searchDirs(e))
	if err != nil {
		return nil, &UnavailableError{Engine: e, Err: fmt.Errorf("no %s binaries for a private server: %w", e, err)}
	}
	var settings []string
	if e == Postgres {
		settings = privateSettings
	}
	srv, err := runLocal(ctx, e, bin, "starting a private", settings)
	if err != nil {
		return nil, err
	}
	srv.Source = "private server"
	return newPrivate(ctx, srv)
}

// newPrivate reads srv's version and wraps it.
func newPrivate(ctx context.Context, srv *Server) (*Private, error) {
	if err := srv.probe(ctx); err != nil {
		return nil, errors.Join(err, srv.Close())
	}
	return &Private{Server: srv, l: srv.local}, nil
}

// Port returns the TCP port the server listens on, on 127.0.0.1; it stays
// the same across Stop and Start.
func (p *Private) Port() int { return p.l.port }

// Pid returns the process id of the running server (PostgreSQL's
// postmaster), or 0 while it is stopped.
func (p *Private) Pid() int { return p.l.pid() }

// Stop shuts the server down cleanly and waits until its process has
// exited: PostgreSQL's fast shutdown (SIGINT, what pg_ctl stop -m fast
// sends: sessions are ended, their transactions rolled back), MySQL's
// normal shutdown (SIGTERM), PgBouncer's immediate shutdown (clients are
// disconnected). The data directory stays: Start starts it again. It does
// nothing on a stopped server.
func (p *Private) Stop() error { return p.l.halt(p.l.cleanSig) }

// Kill ends the server at once, as a crash would: PostgreSQL's immediate
// shutdown (SIGQUIT, what pg_ctl stop -m immediate sends: no checkpoint,
// crash recovery at the next start), SIGKILL for MySQL and PgBouncer. It
// waits until the process has exited; the data directory stays.
func (p *Private) Kill() error { return p.l.halt(p.l.crashSig) }

// Start starts a stopped server again, on the same port and with the same
// data, and waits until it answers (within LocalTimeout).
func (p *Private) Start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, LocalTimeout)
	defer cancel()
	return p.l.launch(ctx, false)
}

// StartStandby makes a streaming standby of the PostgreSQL server p with
// pg_basebackup -R (installed next to postgres), starts it on a port of its
// own and makes it p's synchronous standby (synchronous_standby_names = '*'
// on p, set after the copy so that the standby does not inherit it): from
// then on a commit on p returns only once the standby has flushed it. It
// returns once the standby is streaming in sync. Close the standby before
// or after p; Promote turns it into a primary.
func (p *Private) StartStandby(ctx context.Context) (*Private, error) {
	if p.Engine != Postgres || p.l.bouncer {
		return nil, errors.New("a standby needs a PostgreSQL server")
	}
	ctx, cancel := context.WithTimeout(ctx, LocalTimeout)
	defer cancel()
	basebackup := besideServer(p.l.bin.server, "pg_basebackup")
	if basebackup == "" {
		return nil, &UnavailableError{Engine: Postgres, Err: fmt.Errorf("pg_basebackup not found next to %s", p.l.bin.server)}
	}
	l, err := newLocal(Postgres, p.l.bin, "pg-standby-")
	if err != nil {
		return nil, err
	}
	l.settings, l.standby = privateSettings, true
	fmt.Fprintf(os.Stderr, "dbserver: starting a standby of the private %s on port %d in %s\n", p.Engine, p.Port(), l.dir)
	srv := &Server{Engine: Postgres, Source: "private standby", local: l}
	fail := func(err error) (*Private, error) { return nil, errors.Join(err, l.stop()) }
	out, err := l.run(ctx, basebackup, "-D", l.data, "-R", "-X", "stream", "-c", "fast", "--no-sync",
		"-h", "127.0.0.1", "-p", strconv.Itoa(p.Port()), "-U", "postgres")
	if err != nil {
		return fail(fmt.Errorf("pg_basebackup: %w%s", err, tail(out)))
	}
	if l.port, err = freePort(); err != nil {
		return fail(err)
	}
	if err := l.launch(ctx, false); err != nil {
		return fail(err)
	}
	_, srv.DSN = l.serverArgs()
	standby, err := newPrivate(ctx, srv)
	if err != nil {
		return nil, err
	}
	// Synchronous once the standby streams: before, commits on p would wait.
	err = withDB(ctx, "pgx", p.DSN, func(db *sql.DB) error {
		if err := waitFor(ctx, db, "SELECT count(*) = 1 FROM pg_stat_replication WHERE state = 'streaming'"); err != nil {
			return fmt.Errorf("standby not streaming: %w", err)
		}
		for _, s := range []string{"ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()"} {
			if _, err := db.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		if err := waitFor(ctx, db, "SELECT count(*) = 1 FROM pg_stat_replication WHERE sync_state = 'sync'"); err != nil {
			return fmt.Errorf("standby not synchronous: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(err, standby.Close())
	}
	return standby, nil
}

// Promote turns the standby p into a primary (pg_promote) and returns once
// it accepts writes. The old primary must not run any more: nothing here
// fences it.
func (p *Private) Promote(ctx context.Context) error {
	if !p.l.standby {
		return errors.New("not a standby")
	}
	ctx, cancel := context.WithTimeout(ctx, LocalTimeout)
	defer cancel()
	return withDB(ctx, "pgx", p.DSN, func(db *sql.DB) error {
		var ok bool
		if err := db.QueryRowContext(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
			return fmt.Errorf("pg_promote: %w", err)
		}
		if !ok {
			return errors.New("pg_promote: not promoted within 60 s")
		}
		p.l.standby = false
		return waitFor(ctx, db, "SELECT NOT pg_is_in_recovery()")
	})
}

// StartPgBouncer starts a private PgBouncer in transaction pooling mode on a
// port of its own, in front of the private PostgreSQL server upstream
// (auth_type = trust; every database of upstream reachable under its own
// name). It is a Private whose DSN names the database test through
// PgBouncer; Stop is PgBouncer's immediate shutdown (every client
// disconnected), Start starts it again on the same port; StartStandby and
// Promote do not apply. The pgbouncer program is looked for on PATH and in
// /usr/sbin, /usr/bin and Homebrew's bin directories; when it is missing
// the error is an *UnavailableError (Debian: package pgbouncer, which
// integration/cluster/pgbouncer.sh installs). As root it runs as the
// postgres account.
func StartPgBouncer(ctx context.Context, upstream *Private) (*Private, error) {
	dirs := append(filepath.SplitList(os.Getenv("PATH")), "/usr/sbin", "/usr/bin", "/usr/local/bin", "/opt/homebrew/bin")
	prog := ""
	for _, d := range dirs {
		if prog = lookIn(d, []string{"pgbouncer"}); prog != "" {
			break
		}
	}
	if prog == "" {
		return nil, &UnavailableError{Engine: Postgres, Err: notFound([]string{"pgbouncer"}, dirs)}
	}
	ctx, cancel := context.WithTimeout(ctx, LocalTimeout)
	defer cancel()
	l, err := newLocal(Postgres, &binaries{server: prog}, "pgbouncer-")
	if err != nil {
		return nil, err
	}
	l.bouncer, l.data = true, ""
	fail := func(err error) (*Private, error) { return nil, errors.Join(err, l.stop()) }
	if l.cleanSig, err = bouncerStopSignal(prog); err != nil {
		return fail(err)
	}
	l.crashSig = syscall.SIGKILL
	if l.port, err = freePort(); err != nil {
		return fail(err)
	}
	if err := l.writeBouncerConfig(upstream.Port()); err != nil {
		return fail(err)
	}
	fmt.Fprintf(os.Stderr, "dbserver: starting a private PgBouncer in front of port %d in %s\n", upstream.Port(), l.dir)
	if err := l.launch(ctx, false); err != nil {
		return fail(err)
	}
	srv := &Server{Engine: Postgres, Source: "private PgBouncer", local: l}
	_, srv.DSN = l.serverArgs()
	return newPrivate(ctx, srv)
}

// writeBouncerConfig writes pgbouncer.ini and its user list into l.dir.
func (l *localServer) writeBouncerConfig(upstreamPort int) error {
	up := "host=127.0.0.1 port=" + strconv.Itoa(upstreamPort)
	ini := strings.Join([]string{
		"[databases]",
		"* = " + up,
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(l.port),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + filepath.Join(l.dir, "userlist.txt"),
		"pool_mode = transaction",
		"max_client_conn = 500",
		"default_pool_size = 20",
		"ignore_startup_parameters = extra_float_digits",
		// Not server.log, which launch creates as the caller for the output.
		"logfile = " + filepath.Join(l.dir, "pgbouncer.log"),
		"",
	}, "\n")
	// auth_type = trust still needs the user to be listed.
	files := map[string]string{"pgbouncer.ini": ini, "userlist.txt": `"postgres" ""` + "\n"}
	for name, text := range files {
		path := filepath.Join(l.dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
		if l.acct != nil && l.acct.name != "root" {
			if err := os.Chown(path, int(l.acct.uid), int(l.acct.gid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// bouncerStopSignal returns the signal of PgBouncer's immediate shutdown:
// SIGTERM before 1.23, SIGQUIT since (where SIGTERM waits for clients).
func bouncerStopSignal(prog string) (syscall.Signal, error) {
	out, err := exec.Command(prog, "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("%s --version: %w", prog, err)
	}
	// "PgBouncer 1.18.0"
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return 0, fmt.Errorf("%s --version: unexpected output", prog)
	}
	v := numbers(f[1])
	if len(v) >= 2 && (v[0] > 1 || v[0] == 1 && v[1] >= 23) {
		return syscall.SIGQUIT, nil
	}
	return syscall.SIGTERM, nil
}

// besideServer returns the program name in the directory of server, or of
// the file it links to (a postgres on PATH linking to
// /usr/lib/postgresql/15/bin/postgres), so that its version is the
// server's; "" if there is none.
func besideServer(server, name string) string {
	dirs := []string{filepath.Dir(server)}
	if real, err := filepath.EvalSymlinks(server); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	for _, d := range dirs {
		if p := lookIn(d, []string{name}); p != "" {
			return p
		}
	}
	return ""
}

// waitFor runs query, which returns one boolean, until it is true or ctx
// ends.
func waitFor(ctx context.Context, db *sql.DB, query string) error {
	for {
		var ok bool
		err := db.QueryRowContext(ctx, query).Scan(&ok)
		if err == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v, %v)", ctx.Err(), ok, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
