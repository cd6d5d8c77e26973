// Package dbtest gives integration tests a fresh, empty PostgreSQL or
// MySQL/MariaDB database per test, wherever the servers come from.
//
// Each server is found once per test binary, in this order:
//
//  1. An explicit server-level DSN: TXRETRY_PG_DSN (a pgx URL such as
//     postgres://postgres@127.0.0.1:5432/test?sslmode=disable) or
//     TXRETRY_MYSQL_DSN (a go-sql-driver DSN such as
//     root@tcp(127.0.0.1:3306)/test). The server must answer a ping within
//     10 s; a configured server that does not answer fails the test, it is
//     never skipped, because the configuration is wrong.
//  2. A container started with testcontainers-go, when a Docker engine
//     answers within 10 s. TXRETRY_PG_IMAGE selects the PostgreSQL image
//     (default postgres:17-alpine). TXRETRY_MYSQL_IMAGE selects the MySQL
//     image (default mysql:8.4); TXRETRY_MYSQL_FLAVOR=mariadb, or an image
//     name containing "mariadb", selects MariaDB instead (default image
//     mariadb:11.4). Starting a container, including pulling its image, is
//     bounded by 3 minutes.
//  3. Otherwise the test is skipped with a message naming the variables to
//     set — unless CI is true (as on GitHub Actions), in which case the test
//     fails: a CI run that silently skips every integration test proves
//     nothing.
//
// [Postgres] and [MySQL] create a database named
// txr_<sanitized test name>_<random> on that server with the admin DSN and
// drop it when the test ends, so parallel tests never share tables. The drop
// also ends sessions the test left open (PostgreSQL: DROP DATABASE ... WITH
// (FORCE), or pg_terminate_backend before PostgreSQL 13; MySQL: KILL of the
// sessions using the database), so a leaked connection or transaction cannot
// block it.
//
// A test package that may start containers should run its tests through
// [Main], which terminates them when the tests are done:
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
//
// Without Main the containers are still removed by the testcontainers
// reaper once the test binary exits.
//
// All functions that take a testing.TB may skip or fail the test, so they
// must be called from the goroutine running the test, like t.Skip and
// t.Fatal.
package dbtest
