package dbserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers the "mysql" database/sql driver
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/testcontainers/testcontainers-go"
)

// Environment variables read by Find.
const (
	// EnvPGDSN holds a PostgreSQL DSN (pgx URL or keyword/value form).
	EnvPGDSN = "TXRETRY_PG_DSN"
	// EnvMySQLDSN holds a MySQL or MariaDB DSN in go-sql-driver form.
	EnvMySQLDSN = "TXRETRY_MYSQL_DSN"
	// EnvMySQLFlavor chooses the container when EnvMySQLDSN is empty:
	// "mysql" (default) or "mariadb".
	EnvMySQLFlavor = "TXRETRY_MYSQL_FLAVOR"
	// EnvPGImage overrides the PostgreSQL container image.
	EnvPGImage = "TXRETRY_PG_IMAGE"
	// EnvMySQLImage overrides the MySQL or MariaDB container image.
	EnvMySQLImage = "TXRETRY_MYSQL_IMAGE"
	// EnvCI, when true, makes a missing server fail a test instead of
	// skipping it (package dbservertest).
	EnvCI = "CI"
)

// Timeouts of the steps that talk to Docker or to a server.
const (
	// DockerTimeout bounds the check that a Docker engine answers: 5 s
	// were exceeded by a running engine on a loaded two-core machine.
	DockerTimeout = 15 * time.Second
	// ContainerTimeout bounds starting one container, image pull included.
	ContainerTimeout = 3 * time.Minute
	// LocalTimeout bounds starting one throwaway server from installed
	// binaries, data directory included.
	LocalTimeout = time.Minute
	// PingTimeout bounds the check that a server answers.
	PingTimeout = 10 * time.Second
	// FindTimeout bounds Find as a whole in the worst case.
	FindTimeout = ContainerTimeout + LocalTimeout + time.Minute
)

// Server is a reachable database server.
type Server struct {
	// Engine is the server's engine family.
	Engine Engine
	// DSN connects to the server as a user that may create databases:
	// the DSN from the environment, or the superuser of a container or
	// throwaway server (postgres or root, no password, database "test" or
	// "postgres"). Do not print it: it may hold a password.
	DSN string
	// Source says where the server came from, for output: the environment
	// variable's name, "container <image>" or "throwaway server". It
	// never contains the DSN.
	Source string
	// Version is the version string the server reports.
	Version string

	// versionNum is PostgreSQL's server_version_num (150004); 0 for MySQL.
	versionNum int
	ctr        testcontainers.Container
	local      *localServer
	closeOnce  sync.Once
	closeErr   error
}

// Flavor returns "postgres", "mysql" or "mariadb".
func (s *Server) Flavor() string {
	switch {
	case s.Engine == Postgres:
		return "postgres"
	case strings.Contains(strings.ToLower(s.Version), "mariadb"):
		return "mariadb"
	default:
		return "mysql"
	}
}

// String describes the server for output, for example
// "PostgreSQL 15.4 (TXRETRY_PG_DSN)" or "MariaDB 11.4.2 (container mariadb:11.4)".
func (s *Server) String() string {
	product := s.Engine.String()
	version := s.Version
	if s.Flavor() == "mariadb" {
		product = "MariaDB"
		version, _, _ = strings.Cut(version, "-")
	}
	version, _, _ = strings.Cut(version, " ") // "15.4 (Debian 15.4-1)"
	return fmt.Sprintf("%s %s (%s)", product, version, s.Source)
}

// Path names the way Find got the server: "DSN" (from the environment),
// "container" or "throwaway" (a server started from installed binaries).
func (s *Server) Path() string {
	switch {
	case s.ctr != nil:
		return "container"
	case s.local != nil:
		return "throwaway"
	default:
		return "DSN"
	}
}

// FromContainer reports whether the server is a container Find started.
func (s *Server) FromContainer() bool { return s.ctr != nil }

// Close stops the server if Find started it: it terminates the container,
// or stops the throwaway server and removes its data directory. For a
// server from the environment it does nothing. It is safe to call more than
// once and concurrently.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		switch {
		case s.ctr != nil:
			s.closeErr = terminate(s.ctr)
		case s.local != nil:
			s.closeErr = s.local.stop()
		}
	})
	return s.closeErr
}

// UnavailableError says why no server of an engine could be used, and what to
// do so that one can.
type UnavailableError struct {
	// Engine is the engine that is unavailable.
	Engine Engine
	// Configured reports a broken explicit configuration (a DSN that does
	// not answer, a bad flavor) rather than an absent server.
	Configured bool
	// Err is the cause.
	Err error
}

// Error implements error.
func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%s unavailable: %v", e.Engine, e.Err)
}

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Misconfigured reports whether err, from Find or FindAll, says more than
// that a server is absent: a DSN that is set but whose server does not
// answer, a bad flavor, or an error that is not an *UnavailableError. A
// program fails then, while it may run on the servers it found when the
// others are merely absent.
func Misconfigured(err error) bool {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		if e == nil {
			continue
		}
		if ue, ok := errors.AsType[*UnavailableError](e); !ok || ue.Configured {
			return true
		}
	}
	return false
}

// hint says the three ways of making a server of e available.
func hint(e Engine, image string) string {
	example, pkgs := "postgres://user@host:5432/db?sslmode=disable",
		"postgresql on Debian/Ubuntu, postgresql-server on Fedora, postgresql with Homebrew"
	if e == MySQL {
		example, pkgs = "user:password@tcp(host:3306)/db",
			"mariadb-server on Debian/Ubuntu and Fedora, mariadb with Homebrew"
	}
	return fmt.Sprintf("set %s (for example %s), or start Docker so that a %s container can run, "+
		"or install the %s server binaries (package %s)", e.EnvVar(), example, image, e, pkgs)
}

// Find returns a server of engine e, in the order the package documents.
// Close it when done. The error, if any, is an *UnavailableError.
func Find(ctx context.Context, e Engine) (*Server, error) {
	return defaultResolver().find(ctx, e)
}

// FindAll looks for a server of each engine, concurrently, and returns those
// it found, in the order of engines. The error joins an *UnavailableError
// for each engine it did not find; servers may be non-empty even then.
func FindAll(ctx context.Context, engines ...Engine) ([]*Server, error) {
	servers := make([]*Server, len(engines))
	errs := make([]error, len(engines))
	var wg sync.WaitGroup
	for i, e := range engines {
		wg.Go(func() { servers[i], errs[i] = Find(ctx, e) })
	}
	wg.Wait()
	found := servers[:0]
	for _, s := range servers {
		if s != nil {
			found = append(found, s)
		}
	}
	return found, errors.Join(errs...)
}

// resolver is Find with its environment, its Docker check and its ways of
// starting servers as fields, so that tests can replace each.
type resolver struct {
	getenv func(string) string
	// docker reports whether a Docker engine answers.
	docker func(context.Context) error
	// container starts a container.
	container func(context.Context, Engine, containerSpec) (*Server, error)
	// binaries finds the installed binaries of an engine.
	binaries func(Engine) (*binaries, error)
	// local starts a throwaway server from binaries.
	local func(context.Context, Engine, *binaries) (*Server, error)
}

// defaultResolver is the resolver of the real environment.
func defaultResolver() resolver {
	return resolver{
		getenv:    os.Getenv,
		docker:    dockerAvailable,
		container: startContainer,
		binaries:  func(e Engine) (*binaries, error) { return findBinaries(e, searchDirs(e)) },
		local:     startLocal,
	}
}

// find is Find with r's parts.
func (r resolver) find(ctx context.Context, e Engine) (*Server, error) {
	if dsn := strings.TrimSpace(r.getenv(e.EnvVar())); dsn != "" {
		srv := &Server{Engine: e, DSN: dsn, Source: e.EnvVar()}
		if err := validDSN(e, dsn); err != nil {
			return nil, &UnavailableError{Engine: e, Configured: true,
				Err: fmt.Errorf("%s is not a valid %s DSN: %w", e.EnvVar(), e, err)}
		}
		if err := srv.probe(ctx); err != nil {
			return nil, &UnavailableError{Engine: e, Configured: true,
				Err: fmt.Errorf("%s is set but its server does not answer: %w", e.EnvVar(), err)}
		}
		return srv, nil
	}

	spec, err := containerFor(e, r.getenv)
	if err != nil {
		return nil, &UnavailableError{Engine: e, Configured: true, Err: err}
	}
	dockerErr := r.docker(ctx)
	if imageVar := imageEnvVar(e); dockerErr != nil && strings.TrimSpace(r.getenv(imageVar)) != "" {
		// An image asked for by name means containers (make matrix): a
		// throwaway server instead would test another server silently.
		return nil, &UnavailableError{Engine: e, Configured: true,
			Err: fmt.Errorf("%s is set but Docker is not available: %w", imageVar, dockerErr)}
	}
	if dockerErr == nil {
		srv, err := r.container(ctx, e, spec)
		if err != nil {
			return nil, &UnavailableError{Engine: e,
				Err: fmt.Errorf("container %s did not start: %w; %s", spec.image, err, hint(e, spec.image))}
		}
		if err := srv.probe(ctx); err != nil {
			return nil, &UnavailableError{Engine: e,
				Err: errors.Join(fmt.Errorf("container %s does not answer: %w", spec.image, err), srv.Close())}
		}
		return srv, nil
	}

	bin, binErr := r.binaries(e)
	if binErr != nil {
		return nil, &UnavailableError{Engine: e, Err: fmt.Errorf(
			"%s is not set; Docker is not available (%w); no %s binaries are installed (%w); %s",
			e.EnvVar(), dockerErr, e, binErr, hint(e, spec.image))}
	}
	srv, err := r.local(ctx, e, bin)
	if err != nil {
		return nil, &UnavailableError{Engine: e, Err: fmt.Errorf(
			"%s is not set; Docker is not available (%w); a throwaway server from %s did not start: %w; %s",
			e.EnvVar(), dockerErr, bin.server, err, hint(e, spec.image))}
	}
	if err := srv.probe(ctx); err != nil {
		return nil, &UnavailableError{Engine: e,
			Err: errors.Join(fmt.Errorf("throwaway server from %s does not answer: %w", bin.server, err), srv.Close())}
	}
	return srv, nil
}

// imageEnvVar is the variable that names e's container image.
func imageEnvVar(e Engine) string {
	if e == Postgres {
		return EnvPGImage
	}
	return EnvMySQLImage
}

// probe pings the server until it answers or PingTimeout passes, and reads
// its version.
func (s *Server) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	return withDB(ctx, s.Engine.Driver(), s.DSN, func(db *sql.DB) error {
		if s.Engine == Postgres {
			return db.QueryRowContext(ctx,
				"SELECT current_setting('server_version_num')::int, current_setting('server_version')",
			).Scan(&s.versionNum, &s.Version)
		}
		return db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&s.Version)
	})
}

// pingInterval is the pause between two pings of a server that is not
// ready yet.
const pingInterval = 100 * time.Millisecond

// ping pings db until it answers or ctx ends; a server that has just
// started gets the whole timeout to come up.
func ping(ctx context.Context, db *sql.DB) error {
	var last error
	for {
		err := db.PingContext(ctx)
		if err == nil {
			return nil
		}
		if last == nil || ctx.Err() == nil {
			// Keep the telling error, not "context deadline exceeded".
			last = err
		}
		timer := time.NewTimer(pingInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("no answer: %w", last)
		case <-timer.C:
		}
	}
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

// withConn opens one connection to dsn, runs f on it and closes everything.
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
