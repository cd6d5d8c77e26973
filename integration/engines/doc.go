// Package engines holds txretry's tests against database setups that change
// how transactions fail or how sessions behave: a 3-node MariaDB Galera
// cluster (certification failures reported as deadlocks, nodes leaving, a
// node killed under load, commits lost on a dying node, the commit-marker
// verifier on another node),
// PgBouncer in transaction pooling mode (pgx query modes, both built-in
// verifiers and the contention lease through the pooler) and TiDB (pessimistic deadlocks, optimistic
// conflicts and schema changes at COMMIT, lost commits, the commit-marker
// verifier in both transaction modes).
//
// The servers are started by the scripts in integration/cluster, which
// make test-all runs (through integration/cmd/withdb -cluster, PgBouncer in
// front of the PostgreSQL server the tests use) and which write the
// environment the tests read; by hand:
//
//	integration/cluster/galera.sh start
//	integration/cluster/pgbouncer.sh start
//	integration/cluster/tidb.sh start
//	. integration/cluster/.run/env   # TXRETRY_GALERA_DSNS, TXRETRY_PGBOUNCER_DSN, TXRETRY_TIDB_DSN, TXRETRY_TIDB_STATUS
//
// TXRETRY_GALERA_DSNS holds three comma-separated go-sql-driver DSNs, one per
// node; TXRETRY_PGBOUNCER_DSN a pgx URL of PgBouncer, whose upstream must be
// the PostgreSQL server of TXRETRY_PG_DSN (pgbouncer.sh's
// PGBOUNCER_UPSTREAM_HOST and PGBOUNCER_UPSTREAM_PORT; the tests create a
// database there and reach it through PgBouncer's wildcard entry).
// TXRETRY_TIDB_DSN is a go-sql-driver DSN of a TiDB server,
// TXRETRY_TIDB_STATUS the host:port of its status API, through which one
// test sets a failpoint (tidb.sh's build has them). A test whose variable is
// unset is skipped, or fails when CI is true. The tests that stop, freeze or
// kill a node need the cluster started by galera.sh, which they drive, and
// leave it whole again (all three nodes Synced) when they end.
//
// The package has test files only; this file exists for its documentation.
package engines
