// Bank is txretry's demo: a short burst of concurrent SERIALIZABLE money
// transfers among a few accounts, on PostgreSQL (pgx native through
// pgxretry.RunInTx, and pgx's database/sql driver through txretry.RunInTx)
// and on MySQL or MariaDB (go-sql-driver/mysql through txretry.RunInTx),
// whichever are reachable.
//
// The transfers conflict on purpose: the database aborts some of them with a
// serialization failure (SQLSTATE 40001) or a deadlock (40P01, MySQL error
// 1213), or pgxretry's lock timeout ends a lock wait (55P03, which on
// PostgreSQL ends a deadlock in 50 ms rather than the server's 1 s), and
// txretry runs those again. For each database the demo prints the
// commits, the failed calls, the attempts, the retryable errors by SQLSTATE
// or error number (counted by an observer), the elapsed time, and an
// invariant check: the sum of the balances is unchanged, and every transfer
// reported done is in the transfers table exactly once while every other one
// left no trace, each account's balance matching its transfers.
//
// Usage:
//
//	go run ./bank [-workers 32] [-transfers 25] [-accounts 10] [-db all|postgres|mysql]
//
// The servers come from TXRETRY_PG_DSN and TXRETRY_MYSQL_DSN, or from
// containers, or are throwaway servers started from the installed binaries
// (see package dbserver in the integration module). The demo keeps its
// tables in the schema or database txretry_demo (flag -namespace), dropping and creating them on each
// run. It exits with status 1 if an invariant fails or no database is
// reachable.
package main
