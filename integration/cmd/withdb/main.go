// Command withdb finds or starts one PostgreSQL and one MySQL-family server
// (package dbserver: the DSN variables, else Docker, else throwaway servers
// from the installed binaries), exports their DSNs in TXRETRY_PG_DSN and
// TXRETRY_MYSQL_DSN, runs a command, and stops what it started when the
// command ends, SIGINT and SIGTERM included. make test runs every go test
// command under one withdb, so that all the test binaries of a run share
// one server per engine.
//
//	withdb [-cluster DIR] -- command [argument ...]
//
// With -cluster, it also starts the Galera cluster, PgBouncer and TiDB of
// the engine tests with the scripts in DIR (integration/cluster), PgBouncer
// in front of the PostgreSQL server found, unless TXRETRY_GALERA_DSNS,
// TXRETRY_PGBOUNCER_DSN or TXRETRY_TIDB_DSN is already set (tidb.sh builds
// TiDB once, about ten minutes, into the user's cache); when a script fails, withdb says so
// and runs the command anyway, and the tests that need it skip with that
// reason (or fail under CI=true).
//
// A server that cannot be had is reported and the command runs anyway: its
// tests then skip with the reason, or fail under CI=true. A DSN variable
// that is set but whose server does not answer ends withdb with status 1.
// withdb exits with the command's status. It is a development tool of
// txretry, not a public API.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txretry/txretry/integration/dbserver"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// Variables the cluster scripts write to DIR/.run/env.
const (
	envGaleraDSNs   = "TXRETRY_GALERA_DSNS"
	envPgBouncerDSN = "TXRETRY_PGBOUNCER_DSN"
	envTiDBDSN      = "TXRETRY_TIDB_DSN"
	envTiDBStatus   = "TXRETRY_TIDB_STATUS"
)

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("withdb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	clusterDir := fs.String("cluster", "", "start the Galera cluster, PgBouncer and TiDB with the scripts in `dir`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: withdb [-cluster dir] -- command [argument ...]")
		return 2
	}

	// withdb stops the servers itself, after the command has ended.
	dbserver.SetStopOnSignal(false)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()

	servers, findErr := dbserver.FindAll(ctx, dbserver.Postgres, dbserver.MySQL)
	defer func() {
		for _, s := range servers {
			if err := s.Close(); err != nil {
				fmt.Fprintf(stderr, "withdb: stop %s: %v\n", s, err)
			}
		}
	}()
	if findErr != nil {
		fmt.Fprintf(stderr, "withdb: %v\n", findErr)
		if dbserver.Misconfigured(findErr) || ctx.Err() != nil {
			return 1
		}
	}
	env := os.Environ()
	var pg *dbserver.Server
	for _, s := range servers {
		fmt.Fprintf(stderr, "withdb: %s for every test, %s path: %s\n", s.Engine, s.Path(), s)
		env = setEnv(env, s.Engine.EnvVar(), s.DSN)
		if s.Engine == dbserver.Postgres {
			pg = s
		}
	}
	cancel() // the signal goroutine ends; signals go to sigs from here on

	if *clusterDir != "" {
		vars, stop := startCluster(*clusterDir, pg, stderr)
		defer stop()
		for k, v := range vars {
			env = setEnv(env, k, v)
		}
	}
	return runCommand(fs.Args(), env, sigs, stderr)
}

// setEnv returns env with key set to value.
func setEnv(env []string, key, value string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}

// runCommand runs args with env, passes the signals on to it (a Ctrl-C in
// a terminal reaches it directly too), and returns its exit status.
func runCommand(args, env []string, sigs <-chan os.Signal, stderr io.Writer) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "withdb: %v\n", err)
		return 127
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-sigs:
				_ = cmd.Process.Signal(sig)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	default:
		fmt.Fprintf(stderr, "withdb: %v\n", err)
		return 1
	}
}

// startCluster starts the Galera cluster and PgBouncer (in front of pg)
// with the scripts in dir, unless their variables are set already, and
// returns the variables to export and a function that stops what it
// started. A script that fails is reported, and its variable left unset.
func startCluster(dir string, pg *dbserver.Server, stderr io.Writer) (map[string]string, func()) {
	var started []string
	stop := func() {
		for i := len(started) - 1; i >= 0; i-- {
			if err := script(dir, started[i], nil, "stop").Run(); err != nil {
				fmt.Fprintf(stderr, "withdb: %s stop: %v\n", started[i], err)
			}
		}
	}
	type part struct {
		script, env string
		extra       []string
		why         string
	}
	parts := []part{{script: "galera.sh", env: envGaleraDSNs}}
	bouncer := part{script: "pgbouncer.sh", env: envPgBouncerDSN}
	if pg == nil {
		bouncer.why = "no PostgreSQL server to put it in front of"
	} else if cfg, err := pgconn.ParseConfig(pg.DSN); err != nil {
		bouncer.why = fmt.Sprintf("%s: %v", pg.Engine.EnvVar(), err)
	} else {
		bouncer.extra = []string{
			"PGBOUNCER_UPSTREAM_HOST=" + cfg.Host,
			fmt.Sprintf("PGBOUNCER_UPSTREAM_PORT=%d", cfg.Port),
		}
	}
	parts = append(parts, bouncer, part{script: "tidb.sh", env: envTiDBDSN})
	for _, p := range parts {
		switch {
		case os.Getenv(p.env) != "":
			fmt.Fprintf(stderr, "withdb: %s is set: %s not started\n", p.env, p.script)
			continue
		case p.why != "":
			fmt.Fprintf(stderr, "withdb: %s not started: %s; its tests skip (fail under CI=true)\n", p.script, p.why)
			continue
		}
		fmt.Fprintf(stderr, "withdb: %s start\n", p.script)
		cmd := script(dir, p.script, p.extra, "start")
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(stderr, "withdb: %s start failed (%v); its tests skip (fail under CI=true)\n", p.script, err)
			// It cleans up after itself, but stop is harmless.
			_ = script(dir, p.script, nil, "stop").Run()
			continue
		}
		started = append(started, p.script)
	}
	vars, err := readEnvFile(filepath.Join(dir, ".run", "env"))
	if err != nil && len(started) > 0 {
		fmt.Fprintf(stderr, "withdb: %v\n", err)
	}
	for k := range vars {
		switch k {
		case envGaleraDSNs, envPgBouncerDSN, envTiDBDSN, envTiDBStatus:
			if os.Getenv(k) == "" {
				continue
			}
		}
		delete(vars, k)
	}
	return vars, stop
}

// script returns the command that runs a cluster script.
func script(dir, name string, env []string, arg string) *exec.Cmd {
	cmd := exec.Command("bash", filepath.Join(dir, name), arg)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// readEnvFile reads the export NAME='value' lines the cluster scripts
// write.
func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export ")
		if !ok {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			vars[k] = strings.Trim(v, `'"`)
		}
	}
	return vars, sc.Err()
}
