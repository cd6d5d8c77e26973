// Package dbserver finds or starts the PostgreSQL and MySQL/MariaDB servers
// that txretry's example programs and integration tests run against. It is
// not a public API: it lives in the integration module, which the examples
// module requires through a replace directive, so that users of txretry
// never get testcontainers-go in their module graph.
//
// [Find] looks for a server of an engine in this order:
//
//  1. the DSN in TXRETRY_PG_DSN (PostgreSQL, a pgx URL or keyword/value DSN)
//     or TXRETRY_MYSQL_DSN (MySQL or MariaDB, a go-sql-driver DSN). A DSN
//     that is set but whose server does not answer is an error, never a
//     reason to look further;
//  2. a container started with testcontainers-go when a Docker engine
//     answers: postgres:17-alpine, and mysql:8.4 or, with
//     TXRETRY_MYSQL_FLAVOR=mariadb, mariadb:11.4 (TXRETRY_PG_IMAGE and
//     TXRETRY_MYSQL_IMAGE override the images). Before its first call into
//     testcontainers-go, dbserver sets TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
//     (mapped ports are dialled on loopback, never on a gateway) and
//     TESTCONTAINERS_RYUK_DISABLED=true (no reaper image; dbserver
//     terminates its containers) unless they are set. An image variable
//     set while Docker does not answer is an error, not a reason to look
//     further;
//  3. a throwaway server started from the binaries installed on the machine:
//     PostgreSQL's initdb and postgres, MariaDB's mariadb-install-db and
//     mariadbd (or MySQL's mysqld --initialize-insecure and mysqld), found
//     on PATH or in the usual Debian, Fedora and Homebrew locations. It gets
//     a fresh data directory under the temporary folder, a free loopback
//     port and its Unix socket in that directory, and no password; as root
//     it runs as the postgres or mysql account. [Server.Close] stops it and
//     removes the directory, and so does SIGINT, SIGTERM or SIGHUP to the
//     process (see [SetStopOnSignal]);
//  4. otherwise an [UnavailableError] that names all three ways and the
//     packages that bring the binaries.
//
// A server already running on a default port is never used unless its DSN
// is given: tests create and drop things, and a user's own database is not
// theirs to touch.
//
// A server is resolved once per process. To share one server per engine
// between all the test binaries of a run, start them through the withdb
// command (integration/cmd/withdb), which resolves the servers once and
// exports their DSNs to the command it runs.
//
// [Server.Namespace] gives a program a schema or database of its own;
// [Server.CreateDatabase] gives a test a fresh database. Package
// dbservertest wraps both for tests.
package dbserver
