package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// serverInfo describes a reachable server.
type serverInfo struct {
	// flavor is "postgres", "mysql" or "mariadb".
	flavor string
	// version is the version string the server reports.
	version string
	// versionNum is PostgreSQL's server_version_num (for example 150004);
	// 0 for the MySQL family.
	versionNum int
}

// result is the outcome of resolving one server; it is computed once per
// test binary.
type result struct {
	backend backend
	// admin is the server-level DSN; empty when err is set.
	admin string
	// source names where the server came from, for logs: the environment
	// variable or the container image. It never contains a DSN.
	source string
	info   serverInfo
	// err says why the server is unavailable.
	err error
	// configured reports that err concerns an explicit configuration
	// (a DSN or a flavor variable) rather than an absent server.
	configured bool
}

// backend holds what differs between PostgreSQL and the MySQL family.
type backend struct {
	// name is the product name for messages: "PostgreSQL" or "MySQL".
	name string
	// dsnEnv is the variable holding the server-level DSN.
	dsnEnv string
	// example is a DSN shown in the message when no server is found.
	example string
	// maxIdent is the longest database name the server accepts, in bytes.
	maxIdent int
	// pingTimeout bounds the reachability check.
	pingTimeout time.Duration
	// probe checks that the server at dsn answers and describes it.
	probe func(ctx context.Context, dsn string) (serverInfo, error)
	// container describes the container to start, from the environment.
	container func(getenv func(string) string) (containerSpec, error)
	// databaseDSN derives the DSN of database name from the admin DSN.
	databaseDSN func(admin, name string) (string, error)
	// create creates database name with the admin DSN.
	create func(ctx context.Context, admin, name string) error
	// drop drops database name with the admin DSN, ending its sessions.
	drop func(ctx context.Context, admin, name string, info serverInfo) error
}

// resolve finds the server: the DSN in b.dsnEnv if set, else a container if
// docker reports a working engine. It never skips or fails a test itself;
// the caller decides with missing.
func (b backend) resolve(getenv func(string) string, docker func() error) result {
	r := result{backend: b}

	if dsn := getenv(b.dsnEnv); dsn != "" {
		r.configured = true
		r.source = b.dsnEnv
		if _, err := b.databaseDSN(dsn, "txr_check"); err != nil {
			r.err = fmt.Errorf("%s is not a valid %s DSN: %w", b.dsnEnv, b.name, err)
			return r
		}
		info, err := b.probeWithin(dsn)
		if err != nil {
			r.err = fmt.Errorf("%s is set but its %s server does not answer: %w", b.dsnEnv, b.name, err)
			return r
		}
		r.admin, r.info = dsn, info
		return r
	}

	spec, err := b.container(getenv)
	if err != nil {
		r.configured = true
		r.err = fmt.Errorf("no %s container: %w", b.name, err)
		return r
	}
	r.source = "container " + spec.image
	hint := fmt.Sprintf("set %s=%s or start Docker for testcontainers", b.dsnEnv, b.example)
	if err := docker(); err != nil {
		r.err = fmt.Errorf("no %s: %s (Docker: %w)", b.name, hint, err)
		return r
	}
	admin, err := startContainer(spec)
	if err != nil {
		r.err = fmt.Errorf("no %s: container %s did not start: %w; %s", b.name, spec.image, err, hint)
		return r
	}
	info, err := b.probeWithin(admin)
	if err != nil {
		r.err = fmt.Errorf("no %s: container %s does not answer: %w; %s", b.name, spec.image, err, hint)
		return r
	}
	r.admin, r.info = admin, info
	return r
}

// probeWithin runs b.probe bounded by b.pingTimeout.
func (b backend) probeWithin(dsn string) (serverInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.pingTimeout)
	defer cancel()
	return b.probe(ctx, dsn)
}

// pingRetryInterval is the pause between two pings of a server that is not
// ready yet.
const pingRetryInterval = 250 * time.Millisecond

// ping pings db until it answers or ctx ends; a server that is still starting
// (a CI service, a fresh container behind a port proxy) gets the whole
// timeout to come up.
func ping(ctx context.Context, db *sql.DB) error {
	var last error
	for {
		err := db.PingContext(ctx)
		if err == nil {
			return nil
		}
		if last == nil || ctx.Err() == nil {
			// Keep the most telling error: the one from before the
			// deadline, not "context deadline exceeded".
			last = err
		}
		timer := time.NewTimer(pingRetryInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("no answer to ping: %w", last)
		case <-timer.C:
		}
	}
}

// withConn opens one connection to dsn, runs f on it and closes everything.
// Nothing stays open between calls, so no pool goroutine outlives the call.
func withConn(ctx context.Context, driver, dsn string, f func(*sql.Conn) error) (err error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, conn.Close()) }()
	return f(conn)
}

// withDB opens dsn, pings it until ctx ends, runs f and closes the pool.
func withDB(ctx context.Context, driver, dsn string, f func(*sql.DB) error) (err error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	if err := ping(ctx, db); err != nil {
		return err
	}
	return f(db)
}
