// Package outage holds txretry's tests of a database going away under
// load: a server restart, a PgBouncer restart and a PostgreSQL failover,
// each crossed by 16 workers running SERIALIZABLE transfers with a 5 s
// deadline per call. A Galera node killed under load is tested in package
// engines (TestGaleraNodeKilledUnderLoad), which drives the cluster of
// integration/cluster/galera.sh.
//
// # Servers
//
// Every test starts servers of its own from the installed binaries
// (dbserver.StartPrivate, dbserver.StartPgBouncer,
// Private.StartStandby): each on a free loopback port, in a temporary
// directory removed at the end, never the shared servers of
// TXRETRY_PG_DSN and TXRETRY_MYSQL_DSN, which must not be restarted, and
// never a container. They need PostgreSQL's initdb, postgres and
// pg_basebackup, MariaDB's mariadb-install-db and mariadbd (or MySQL's
// mysqld), and pgbouncer (Debian package pgbouncer, which make test-all
// installs through integration/cluster/pgbouncer.sh). A missing program
// skips the test, or fails it when CI is true.
//
// # What each test proves
//
// Each test runs the load twice where it has a control: with
// WithRetryOnConnectionLoss and the commit marker (WithCommitMarker), and
// without the option. The outage begins once every worker has finished a
// call, and the load goes on until every worker has finished two calls
// begun after the server answered again.
//
//   - TestRestartPgxPool (pgxpool and pgxretry), TestRestartPgxStdlib
//     (database/sql, driver "pgx"), TestRestartPQ (lib/pq) and
//     TestRestartMariaDB (go-sql-driver):
//     the server is shut down (PostgreSQL's fast shutdown, MariaDB's
//     normal one), paused for a second and started on the same port.
//   - TestRestartPgBouncer: a PgBouncer in transaction pooling mode is shut
//     down at once (every client disconnected) and started again in front
//     of a PostgreSQL server that stays up.
//   - TestFailover: a primary with a synchronous standby
//     (pg_basebackup -R, synchronous_standby_names = '*') is killed with
//     an immediate shutdown, and the standby promoted a second later;
//     clients reach it through a multi-host DSN with
//     target_session_attrs=read-write. It runs with the commit marker and
//     with WithXactStatusVerification, which must not trust
//     pg_xact_status on the new timeline.
//   - TestFailoverDuringCommit loses one COMMIT across that failover for
//     certain: the fault proxy holds the reply of a COMMIT the primary made
//     (and the standby has), the primary is killed and the standby
//     promoted, and only then does the call's commit timeout end. The
//     commit marker finds the commit on the standby (nil, applied once);
//     WithXactStatusVerification sees the new timeline and returns
//     ErrCommitUncertain, never a pg_xact_status answer of the standby.
//
// With the option no call fails. Without it, calls fail at once with
// connection errors, each after one attempt with such an error (never
// retried); the only retries are of conflicts and of COMMITs the marker
// found not committed. Every test then checks the ledger, a row each call writes in
// its transaction: no call that returned nil is missing, none is applied
// twice, none reported failed is applied, and the balances match it;
// uncertain calls may be either and are counted. The tests log the
// attempts per call that crossed the outage, the 99th percentile latency
// across it and outside it, and the connection-loss attempts by error,
// split into those during the outage and those after the server answered
// again: the latter found a dead connection in the pool. No figure is
// asserted against a time.
//
// # Settings for production
//
//   - Give every call a deadline (a context or WithTimeBudget): with
//     WithRetryOnConnectionLoss a server that stays away is retried until
//     it ends. Those retries wait full jitter over 50 ms doubling to
//     1 s, so a 1.5 s outage costs a few attempts.
//   - Use a verifier: a COMMIT lost with the connection is never re-run
//     blindly. Across a failover use WithCommitMarker; pg_xact_status
//     cannot tell transactions of the old primary from those of the
//     promoted standby.
//   - PostgreSQL failover with pgx: list every host in the DSN with
//     target_session_attrs=read-write, e.g.
//     postgres://app@db1:5432,db2:5432/app?target_session_attrs=read-write&connect_timeout=2;
//     connect_timeout keeps a dial to a dead host short. The standby must
//     be synchronous (synchronous_standby_names, synchronous_commit on) or
//     commits acknowledged by the old primary can be missing after the
//     promotion.
//   - Stale connections: pgxpool pings a connection idle for more than a
//     second when it is acquired (and destroys one found closed on
//     release); pgx's stdlib driver does the same in ResetSession;
//     database/sql retries a driver.ErrBadConn from a pooled connection
//     twice and then dials a new one; go-sql-driver checks a pooled
//     connection's socket before reusing it. A connection that died less
//     than a second ago can still reach a call, which the option then
//     re-runs. database/sql's SetConnMaxIdleTime and SetConnMaxLifetime
//     (pgxpool's MaxConnIdleTime, MaxConnLifetime) bound how old a pooled
//     connection gets.
//   - MySQL/MariaDB: set the DSN's timeout (dial) and readTimeout (a COMMIT
//     runs without the context); there is no multi-host failover in
//     go-sql-driver, so point it at a proxy or load balancer.
//   - PgBouncer in transaction pooling mode: set pgx's
//     default_query_exec_mode to exec (see integration/cluster/README.md).
//
// The package has test files only; this file exists for its documentation.
package outage
