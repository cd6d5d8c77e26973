// Package dbconn finds the database servers the example programs run against.
//
// For each engine it uses, in this order:
//
//  1. the DSN in TXRETRY_PG_DSN (PostgreSQL, a pgx URL or keyword/value DSN)
//     or TXRETRY_MYSQL_DSN (MySQL or MariaDB, a go-sql-driver DSN);
//  2. otherwise a container started with testcontainers-go:
//     postgres:17-alpine, and mysql:8.4 or, with TXRETRY_MYSQL_FLAVOR=mariadb,
//     mariadb:11.4 (TXRETRY_PG_IMAGE and TXRETRY_MYSQL_IMAGE override the
//     images). The container is terminated by [Server.Close].
//
// When neither works, [Find] returns an [UnavailableError] that says which
// variable to set. Without a Docker engine that answers, it does so within
// a few seconds; starting a container is bounded by [ContainerTimeout].
//
// Each program keeps its tables in a [Namespace] of its own (a PostgreSQL
// schema, a MySQL database, or a table-name prefix when it cannot create a
// database), so that it never disturbs anything else on the server.
//
// The package lives in the examples module, not in the library, so that users
// of txretry never get testcontainers-go in their module graph.
package dbconn
