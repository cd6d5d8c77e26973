package dbconn

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
)

// Timeouts of the steps that talk to Docker or to a server.
const (
	// DockerTimeout bounds the check that a Docker engine answers.
	DockerTimeout = 5 * time.Second
	// ContainerTimeout bounds starting one container, image pull included.
	ContainerTimeout = 3 * time.Minute
	// PingTimeout bounds the check that a server answers.
	PingTimeout = 10 * time.Second
)

// Server is a reachable database server.
type Server struct {
	// Engine is the server's engine family.
	Engine Engine
	// DSN connects to the server: the DSN from the environment, or the
	// container's (root or postgres superuser, database "test" or
	// "postgres"). Do not print it: it may hold a password.
	DSN string
	// Source says where the server came from, for output: the environment
	// variable's name or "container <image>". It never contains the DSN.
	Source string
	// Version is the version string the server reports.
	Version string

	ctr       testcontainers.Container
	closeOnce sync.Once
	closeErr  error
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

// Close terminates the server's container, if Find started one; for a
// server from the environment it does nothing. It is safe to call more than
// once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.ctr != nil {
			s.closeErr = terminate(s.ctr)
		}
	})
	return s.closeErr
}

// UnavailableError says why no server of an engine could be used, and what to
// set so that one can.
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

// hint says how to make a server of e available.
func hint(e Engine, image string) string {
	example := "postgres://user@host:5432/db?sslmode=disable"
	if e == MySQL {
		example = "user:password@tcp(host:3306)/db"
	}
	return fmt.Sprintf("set %s (for example %s), or start Docker so that a %s container can run",
		e.EnvVar(), example, image)
}

// Find returns a server of engine e: the one in e's DSN variable if set,
// else a container it starts (terminate it with Server.Close). The error,
// if any, is an *UnavailableError.
func Find(ctx context.Context, e Engine) (*Server, error) {
	return find(ctx, e, os.Getenv, dockerAvailable)
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

// find is Find with its environment and Docker check as arguments.
func find(ctx context.Context, e Engine, getenv func(string) string, docker func(context.Context) error) (*Server, error) {
	if dsn := strings.TrimSpace(getenv(e.EnvVar())); dsn != "" {
		srv := &Server{Engine: e, DSN: dsn, Source: e.EnvVar()}
		if err := srv.probe(ctx); err != nil {
			return nil, &UnavailableError{Engine: e, Configured: true,
				Err: fmt.Errorf("%s is set but its server does not answer: %w", e.EnvVar(), err)}
		}
		return srv, nil
	}

	spec, err := containerFor(e, getenv)
	if err != nil {
		return nil, &UnavailableError{Engine: e, Configured: true, Err: err}
	}
	if err := docker(ctx); err != nil {
		return nil, &UnavailableError{Engine: e,
			Err: fmt.Errorf("%s is not set and Docker is not available (%w); %s", e.EnvVar(), err, hint(e, spec.image))}
	}
	srv, err := startContainer(ctx, e, spec)
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

// probe pings the server until it answers or PingTimeout passes, and reads
// its version.
func (s *Server) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	db, err := sql.Open(s.Engine.Driver(), s.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := ping(ctx, db); err != nil {
		return err
	}
	query := "SELECT VERSION()"
	if s.Engine == Postgres {
		query = "SHOW server_version"
	}
	return db.QueryRowContext(ctx, query).Scan(&s.Version)
}

// pingInterval is the pause between two pings of a server that is not
// ready yet.
const pingInterval = 250 * time.Millisecond

// ping pings db until it answers or ctx ends; a container that has just
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
		select {
		case <-ctx.Done():
			return last
		case <-time.After(pingInterval):
		}
	}
}
