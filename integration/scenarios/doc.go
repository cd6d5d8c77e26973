// Package scenarios is txretry's real-database test suite: every scenario
// (write skew, deadlocks, serialization failures at COMMIT, permanent errors,
// cancellation, panics, exhaustion, swallowed errors, nested calls,
// concurrent bank transfers, a backend killed mid-transaction, transaction
// options) runs against real servers for each driver path:
//
//   - pgx-native: pgxretry.RunInTx over a *pgxpool.Pool;
//   - pgx-stdlib: txretry.RunInTx over a *sql.DB opened with pgx's stdlib;
//   - pq: txretry.RunInTx over a *sql.DB of lib/pq (PostgreSQL paths too);
//   - mysql: txretry.RunInTx over a *sql.DB of go-sql-driver/mysql, against
//     MySQL or MariaDB.
//
// Each scenario is written once over a small per-path interface (driverPath
// and querier in the tests) and runs as one subtest per path. Servers come
// from package dbserver: TXRETRY_PG_DSN and TXRETRY_MYSQL_DSN when set, else
// containers or throwaway servers it starts.
//
// TestMySQLServerAnswers checks, on whichever MySQL-family server the tests
// get, the server's own answers (deadlock, lock wait timeout, NOWAIT,
// snapshot conflicts, read-only transactions, KILL, wait_timeout) against
// package mysqlerr's classes, per flavor (MySQL or MariaDB).
//
// The package holds tests only.
package scenarios
