package dbserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/modules/mariadb"
	"github.com/testcontainers/testcontainers-go/modules/mysql"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Default container images.
const (
	DefaultPGImage      = "postgres:17-alpine"
	DefaultMySQLImage   = "mysql:8.4"
	DefaultMariaDBImage = "mariadb:11.4"
)

// testcontainersDefaults are the testcontainers-go settings that dbserver
// sets in the process's environment when they are unset, before its first
// call into testcontainers-go:
//
//   - TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1: where a container's mapped
//     ports are dialled. Left unset, testcontainers-go dials the default
//     gateway when it believes it runs inside a container (a /.dockerenv
//     file, as on some CI machines), which is traffic off the machine;
//     Docker publishes the ports on the host's loopback.
//   - TESTCONTAINERS_RYUK_DISABLED=true: no reaper container, whose image
//     may not be pullable; dbserver terminates its containers itself
//     ([Server.Close], dbservertest.Main, withdb).
//
// A value already set (even empty) is kept: a remote Docker host needs its
// own override.
var testcontainersDefaults = [][2]string{
	{"TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1"},
	{"TESTCONTAINERS_RYUK_DISABLED", "true"},
}

// testcontainersEnv makes setTestcontainersEnv run once per process.
var testcontainersEnv sync.Once

// setTestcontainersEnv sets testcontainersDefaults in the environment, once.
// Every path into testcontainers-go (checkDocker, startContainer) calls it
// first.
func setTestcontainersEnv() {
	testcontainersEnv.Do(func() {
		if err := applyDefaults(testcontainersDefaults, os.LookupEnv, os.Setenv); err != nil {
			fmt.Fprintf(os.Stderr, "dbserver: %v\n", err)
		}
	})
}

// applyDefaults sets each unset variable of defaults with set.
func applyDefaults(defaults [][2]string, lookup func(string) (string, bool), set func(string, string) error) error {
	var errs []error
	for _, kv := range defaults {
		if _, ok := lookup(kv[0]); !ok {
			errs = append(errs, set(kv[0], kv[1]))
		}
	}
	return errors.Join(errs...)
}

// containerSpec describes a database container to start.
type containerSpec struct {
	// image is the image reference.
	image string
	// run starts the container and returns it (possibly non-nil even with
	// an error, so that it can be terminated) and its DSN.
	run func(ctx context.Context) (testcontainers.Container, string, error)
}

// containerFor describes the container for e, from the environment.
func containerFor(e Engine, getenv func(string) string) (containerSpec, error) {
	if e == Postgres {
		return postgresContainer(getenv), nil
	}
	return mysqlContainer(getenv)
}

// postgresContainer describes the PostgreSQL container: superuser
// postgres/postgres, database postgres.
func postgresContainer(getenv func(string) string) containerSpec {
	image := cmp.Or(strings.TrimSpace(getenv(EnvPGImage)), DefaultPGImage)
	return containerSpec{
		image: image,
		run: func(ctx context.Context) (testcontainers.Container, string, error) {
			// As postgres.BasicWaitStrategies: "ready to accept
			// connections" twice (the entrypoint restarts the server after
			// its init scripts), then the mapped port; within waitDeadline.
			c, err := postgres.Run(ctx, image, containerWait("5432/tcp",
				wait.ForLog("database system is ready to accept connections").WithOccurrence(2)), quiet)
			if c == nil || err != nil {
				return containerOrNil(c), "", err
			}
			dsn, err := c.ConnectionString(ctx, "sslmode=disable")
			return c, dsn, err
		},
	}
}

// mysqlFlavor chooses the MySQL-family flavor and image from
// TXRETRY_MYSQL_FLAVOR ("", "mysql" or "mariadb") and TXRETRY_MYSQL_IMAGE;
// an image whose name contains "mariadb" means MariaDB.
func mysqlFlavor(getenv func(string) string) (flavor, image string, err error) {
	image = strings.TrimSpace(getenv(EnvMySQLImage))
	imageIsMariaDB := strings.Contains(strings.ToLower(image), "mariadb")
	switch f := strings.ToLower(strings.TrimSpace(getenv(EnvMySQLFlavor))); f {
	case "":
		flavor = "mysql"
		if imageIsMariaDB {
			flavor = "mariadb"
		}
	case "mysql", "mariadb":
		flavor = f
		if f == "mysql" && imageIsMariaDB {
			return "", "", fmt.Errorf("%s=mysql contradicts %s=%s", EnvMySQLFlavor, EnvMySQLImage, image)
		}
	default:
		return "", "", fmt.Errorf("%s=%q: want mysql or mariadb", EnvMySQLFlavor, f)
	}
	if image == "" {
		image = DefaultMySQLImage
		if flavor == "mariadb" {
			image = DefaultMariaDBImage
		}
	}
	return flavor, image, nil
}

// mysqlContainer describes the MySQL or MariaDB container: root with an
// empty password (the container listens on a random local port only) and
// database test.
func mysqlContainer(getenv func(string) string) (containerSpec, error) {
	flavor, image, err := mysqlFlavor(getenv)
	if err != nil {
		return containerSpec{}, err
	}
	// The modules' log line of the final server ("port: 3306" and the
	// version comment), then the mapped port, which avoids a race with
	// Docker Desktop's port proxy; within waitDeadline.
	run := func(ctx context.Context) (testcontainers.Container, string, error) {
		c, err := mysql.Run(ctx, image,
			mysql.WithUsername("root"), mysql.WithPassword(""), mysql.WithDatabase("test"),
			containerWait("3306/tcp", wait.ForLog("port: 3306  MySQL Community Server")), quiet)
		if c == nil || err != nil {
			return containerOrNil(c), "", err
		}
		dsn, err := c.ConnectionString(ctx)
		return c, dsn, err
	}
	if flavor == "mariadb" {
		run = func(ctx context.Context) (testcontainers.Container, string, error) {
			c, err := mariadb.Run(ctx, image,
				mariadb.WithUsername("root"), mariadb.WithPassword(""), mariadb.WithDatabase("test"),
				containerWait("3306/tcp", wait.ForLog("port: 3306  mariadb.org binary distribution")), quiet)
			if c == nil || err != nil {
				return containerOrNil(c), "", err
			}
			dsn, err := c.ConnectionString(ctx)
			return c, dsn, err
		}
	}
	return containerSpec{image: image, run: run}, nil
}

// waitDeadline bounds a container's wait strategy. The modules' own
// strategies give up after 60 s, which a MySQL server initializing its data
// directory on a loaded two-core machine exceeds; ContainerTimeout still
// bounds the whole start.
const waitDeadline = ContainerTimeout

// containerWait replaces a module's wait strategy by ready (its log line) and
// then port listening, each within waitDeadline.
func containerWait(port string, ready *wait.LogStrategy) testcontainers.CustomizeRequestOption {
	return testcontainers.WithWaitStrategyAndDeadline(waitDeadline,
		ready.WithStartupTimeout(waitDeadline),
		wait.ForListeningPort(port).WithStartupTimeout(waitDeadline))
}

// containerOrNil turns a nil module container into a nil interface, so that
// TerminateContainer sees that there is nothing to terminate.
func containerOrNil[C interface {
	comparable
	testcontainers.Container
}](c C) testcontainers.Container {
	var zero C
	if c == zero {
		return nil
	}
	return c
}

// quiet keeps testcontainers' per-step log lines out of the programs'
// output; startContainer prints one line of its own instead.
var quiet = testcontainers.WithLogger(tclog.NewNoopLogger())

// startContainer starts spec's container within ContainerTimeout.
// A container that started but failed its wait strategy is terminated.
func startContainer(ctx context.Context, e Engine, spec containerSpec) (srv *Server, err error) {
	ctx, cancel := context.WithTimeout(ctx, ContainerTimeout)
	defer cancel()
	defer func() {
		// testcontainers panics on some host-discovery paths; a panic must
		// become an error that says what to set, not a crash.
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers panicked: %v", r)
		}
	}()
	setTestcontainersEnv()
	fmt.Fprintf(os.Stderr, "dbserver: %s is not set; starting container %s (at most %v)\n",
		e.EnvVar(), spec.image, ContainerTimeout)
	ctr, dsn, err := spec.run(ctx)
	if err != nil {
		if ctr != nil {
			if terr := terminate(ctr); terr != nil {
				err = fmt.Errorf("%w (and terminating it: %v)", err, terr)
			}
		}
		return nil, err
	}
	return &Server{Engine: e, DSN: dsn, Source: "container " + spec.image, ctr: ctr}, nil
}

// terminate stops and removes a container.
func terminate(ctr testcontainers.Container) error {
	return testcontainers.TerminateContainer(ctr)
}

// docker caches, for the whole process, whether a Docker engine answers.
var docker struct {
	once sync.Once
	err  error
}

// dockerAvailable reports whether testcontainers finds a Docker engine that
// answers within DockerTimeout. Without an engine it returns at once (no
// socket) or after at most DockerTimeout, instead of letting a container
// start hang until ContainerTimeout.
func dockerAvailable(ctx context.Context) error {
	docker.once.Do(func() { docker.err = checkDocker(ctx) })
	return docker.err
}

// checkDocker asks testcontainers for a Docker client, which discovers the
// host (DOCKER_HOST, ~/.testcontainers.properties, the default and rootless
// sockets) and asks the engine for its information. It pings the engine
// once more because the client falls back to the environment's defaults,
// without an error, when the discovered engine does not answer.
func checkDocker(ctx context.Context) (err error) {
	setTestcontainersEnv()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers panicked: %v", r)
		}
	}()
	// The engine's answer is shared by every caller: do not let one
	// caller's cancellation decide it for all.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DockerTimeout)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("no Docker engine answers: %s", oneLine(err))
	}
	if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
		return errors.Join(fmt.Errorf("no Docker engine answers: %s", oneLine(err)), cli.Close())
	}
	return cli.Close()
}

// oneLine joins the lines of err's message so that it stays on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
