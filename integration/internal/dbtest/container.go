package dbtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/mariadb"
	"github.com/testcontainers/testcontainers-go/modules/mysql"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Default container images.
const (
	defaultPGImage      = "postgres:17-alpine"
	defaultMySQLImage   = "mysql:8.4"
	defaultMariaDBImage = "mariadb:11.4"
)

// containerSpec describes a database container to start.
type containerSpec struct {
	// image is the image reference, for messages.
	image string
	// run starts the container and returns it (possibly non-nil even with
	// an error, so that it can be terminated) and its server-level DSN.
	run func(ctx context.Context) (testcontainers.Container, string, error)
}

// postgresContainer describes the PostgreSQL container: image from
// TXRETRY_PG_IMAGE, default postgres:17-alpine. The module's defaults give a
// superuser postgres/postgres and a database postgres.
func postgresContainer(getenv func(string) string) (containerSpec, error) {
	image := cmp.Or(strings.TrimSpace(getenv(envPGImage)), defaultPGImage)
	return containerSpec{
		image: image,
		run: func(ctx context.Context) (testcontainers.Container, string, error) {
			// BasicWaitStrategies waits for the "ready to accept
			// connections" log line twice (the entrypoint restarts the
			// server after init) and for the mapped port to answer.
			c, err := postgres.Run(ctx, image, postgres.BasicWaitStrategies())
			if c == nil {
				return nil, "", err
			}
			if err != nil {
				return c, "", err
			}
			dsn, err := c.ConnectionString(ctx, "sslmode=disable")
			return c, dsn, err
		},
	}, nil
}

// mysqlImage chooses the MySQL-family flavor and image from
// TXRETRY_MYSQL_FLAVOR ("", "mysql" or "mariadb") and TXRETRY_MYSQL_IMAGE.
// An image whose name contains "mariadb" selects MariaDB.
func mysqlImage(getenv func(string) string) (flavor, image string, err error) {
	image = strings.TrimSpace(getenv(envMySQLImage))
	imageIsMariaDB := strings.Contains(strings.ToLower(image), "mariadb")
	switch f := strings.ToLower(strings.TrimSpace(getenv(envMySQLFlavor))); f {
	case "":
		flavor = "mysql"
		if imageIsMariaDB {
			flavor = "mariadb"
		}
	case "mysql":
		if imageIsMariaDB {
			return "", "", fmt.Errorf("%s=mysql contradicts %s=%s", envMySQLFlavor, envMySQLImage, image)
		}
		flavor = "mysql"
	case "mariadb":
		flavor = "mariadb"
	default:
		return "", "", fmt.Errorf("%s=%q: want mysql or mariadb", envMySQLFlavor, f)
	}
	if image == "" {
		image = defaultMySQLImage
		if flavor == "mariadb" {
			image = defaultMariaDBImage
		}
	}
	return flavor, image, nil
}

// mysqlContainer describes the MySQL or MariaDB container. Both run as root
// with an empty password (the container listens on a random local port
// only) and a database test, matching the CI services.
func mysqlContainer(getenv func(string) string) (containerSpec, error) {
	flavor, image, err := mysqlImage(getenv)
	if err != nil {
		return containerSpec{}, err
	}
	// The modules' own wait strategies wait for the "port: 3306" log line
	// of the final server (the init server listens on no port); waiting for
	// the mapped port too avoids races with the port proxy of Docker
	// Desktop, as postgres.BasicWaitStrategies does.
	waitPort := testcontainers.WithAdditionalWaitStrategy(wait.ForListeningPort("3306/tcp"))
	run := func(ctx context.Context) (testcontainers.Container, string, error) {
		c, err := mysql.Run(ctx, image,
			mysql.WithUsername("root"),
			mysql.WithPassword(""),
			mysql.WithDatabase("test"),
			waitPort,
		)
		if c == nil {
			return nil, "", err
		}
		if err != nil {
			return c, "", err
		}
		dsn, err := c.ConnectionString(ctx)
		return c, dsn, err
	}
	if flavor == "mariadb" {
		run = func(ctx context.Context) (testcontainers.Container, string, error) {
			c, err := mariadb.Run(ctx, image,
				mariadb.WithUsername("root"),
				mariadb.WithPassword(""),
				mariadb.WithDatabase("test"),
				waitPort,
			)
			if c == nil {
				return nil, "", err
			}
			if err != nil {
				return c, "", err
			}
			dsn, err := c.ConnectionString(ctx)
			return c, dsn, err
		}
	}
	return containerSpec{image: image, run: run}, nil
}

// containers are the containers started by this test binary, terminated by
// Main.
var containers struct {
	mu   sync.Mutex
	list []testcontainers.Container
}

// startContainer starts spec within startTimeout and returns its
// server-level DSN. A container that started but is unusable is terminated
// at once; a usable one is kept for terminateContainers.
func startContainer(spec containerSpec) (dsn string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	defer func() {
		// testcontainers panics on some host-discovery paths; a panic
		// here must become a skip or failure of the test, not a crash of
		// the whole binary.
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers panicked: %v", r)
		}
	}()

	ctr, dsn, err := spec.run(ctx)
	if err != nil {
		return "", errors.Join(err, testcontainers.TerminateContainer(ctr))
	}
	containers.mu.Lock()
	containers.list = append(containers.list, ctr)
	containers.mu.Unlock()
	return dsn, nil
}

// terminateContainers terminates every container started so far.
func terminateContainers() error {
	containers.mu.Lock()
	list := containers.list
	containers.list = nil
	containers.mu.Unlock()

	var errs []error
	for _, ctr := range list {
		if err := testcontainers.TerminateContainer(ctr); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// docker caches whether a Docker engine answers, for the whole binary.
var docker struct {
	once sync.Once
	err  error
}

// dockerAvailable reports, once per binary, whether testcontainers finds a
// Docker engine that answers within dockerTimeout. Without an engine it
// returns at once (no socket) or after at most dockerTimeout, instead of
// letting a container start hang.
func dockerAvailable() error {
	docker.once.Do(func() { docker.err = checkDocker() })
	return docker.err
}

// checkDocker asks testcontainers for a Docker client, which discovers the
// host (DOCKER_HOST, ~/.testcontainers.properties, the default and rootless
// sockets, ...) and calls the engine's info endpoint.
func checkDocker() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers panicked: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("no engine answers: %s", oneLine(err))
	}
	return cli.Close()
}

// oneLine joins the lines of err's message (errors.Join puts one cause per
// line) so that a skip message stays on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
