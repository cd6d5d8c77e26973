// Package mysqlerr classifies MySQL-protocol errors by their server error
// number, so that a caller can decide whether a failed transaction may be
// run again. It covers MySQL, MariaDB (also with Galera), MySQL Group
// Replication and TiDB, as reported by github.com/go-sql-driver/mysql as
// *mysql.MySQLError. The driver exports no constants for the numbers, so
// this package defines them.
//
// # Error trees
//
// Every function looks at the whole error tree: errors wrapped with %w
// (Unwrap() error) and errors joined with [errors.Join] or any other type
// with Unwrap() []error. The tree is walked depth-first in Unwrap order, the
// order that [errors.Is] and [errors.As] use. Unlike a single [errors.As]
// call, which stops at the first *mysql.MySQLError, [Has] and the Is…
// functions look at every error in the tree, so a join of an unrelated
// server error and a deadlock is still retryable. An error with an As(any)
// bool method is asked for a *mysql.MySQLError too, as [errors.As] would ask
// it.
//
// # Error numbers
//
// "default" numbers are the ones [IsRetryable] accepts. "opt-in" numbers
// have their own func(error) bool that a caller adds on purpose;
// "conn-loss" ones are [IsConnectionLoss]'s. "constant" numbers are defined
// for callers and are not classified here.
//
//	Number  Symbol / name                             Class     Source
//	1213    ER_LOCK_DEADLOCK (SQLSTATE 40001)         default   [MySQL-ERR], [InnoDB-ERR], [MariaDB-ERR], [Galera]
//	1205    ER_LOCK_WAIT_TIMEOUT                      opt-in    [MySQL-ERR], [InnoDB-ERR]
//	1020    ER_CHECKREAD                              opt-in    [MariaDB-ERR], [MariaDB-SI]
//	3101    ER_TRANSACTION_ROLLBACK_DURING_COMMIT     opt-in    [MySQL-ERR], [MySQL-GR]
//	9007    TiDB ErrWriteConflict                     opt-in    [TiDB-ERR]
//	8002    TiDB ErrForUpdateCantRetry                opt-in    [TiDB-ERR]
//	8005    TiDB ErrWriteConflictInTiDB               opt-in    [TiDB-ERR]
//	8022    TiDB ErrTxnRetryable                      opt-in    [TiDB-ERR]
//	8028    TiDB ErrInfoSchemaChanged                 opt-in    [TiDB-ERR]
//	1062    ER_DUP_ENTRY                              constant  [MySQL-ERR]
//	1064    ER_PARSE_ERROR                            constant  [MySQL-ERR]
//	1047    ER_UNKNOWN_COM_ERROR (Galera)             constant  [MySQL-ERR], [Galera]
//	1180    ER_ERROR_DURING_COMMIT                    constant  [MySQL-ERR], [MariaDB-ERR]
//	1053    ER_SERVER_SHUTDOWN                        conn-loss [MySQL-ERR]
//	1927    ER_CONNECTION_KILLED (MariaDB)            conn-loss [MariaDB-ERR]
//	4031    ER_CLIENT_INTERACTION_TIMEOUT (MySQL)     conn-loss [MySQL-ERR]
//	1317    ER_QUERY_INTERRUPTED (SQLSTATE 70100)     constant  [MySQL-ERR]
//	3572    ER_LOCK_NOWAIT (MySQL)                    constant  [MySQL-ERR]
//	1290    ER_OPTION_PREVENTS_STATEMENT              constant  [MySQL-ERR]
//	1792    ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION  constant  [MySQL-ERR]
//	2       TiDB ErrResultUndetermined                (none)    [TiDB-SRC]; never sent, see below
//
// What the numbers mean for a transaction:
//
//   - 1213: InnoDB chose the transaction as a deadlock victim and rolled
//     the whole transaction back; run it again. Galera reports certification
//     failures (a conflicting write committed first on another node, often
//     detected only at COMMIT) with the same number, and so does TiDB for
//     deadlocks in pessimistic mode.
//   - 1205: a row lock was not granted within innodb_lock_wait_timeout.
//     InnoDB rolls back only the statement, not the transaction, unless
//     innodb_rollback_on_timeout is ON. See [IsLockWaitTimeout].
//   - 1020: "Record has changed since last read". MariaDB with
//     innodb_snapshot_isolation=ON (a global and session variable; OFF by
//     default in 10.11, ON from 11.6.2) reports with it that a REPEATABLE READ
//     transaction tried to lock or change a row that another transaction
//     changed after this one's snapshot was taken; the transaction must be
//     run again.
//   - 3101: "Plugin instructed the server to rollback the current
//     transaction". With MySQL Group Replication the transaction failed
//     certification because of a conflict with a transaction from another
//     member, and was rolled back.
//   - 9007: "Write conflict", detected by TiKV (optimistic transactions,
//     or pessimistic ones with tidb_constraint_check_in_place_pessimistic
//     OFF); TiDB says the transaction can be retried.
//   - 8005: "Write Conflict, txnStartTS is stale", a write conflict detected
//     by TiDB itself; TiDB says to retry.
//   - 8002: a transaction with SELECT … FOR UPDATE hit a commit conflict;
//     TiDB rolled it back and says the application can safely retry it.
//   - 8022: the commit failed and the transaction was rolled back; TiDB says
//     the application can safely retry it.
//   - 8028: the table schema changed while the transaction ran; TiDB says
//     the whole transaction can be retried. At COMMIT it means the
//     transaction was rolled back: TiDB checks the schema before the commit
//     point.
//   - 1062: duplicate key. 1064: syntax error. Neither is transient.
//   - 1047: with Galera, "WSREP has not yet prepared node for application
//     use": the node is not in the primary component or not synced.
//   - 1180: "Got error %d during COMMIT"; an engine failed at COMMIT.
//   - 4031: MySQL closed a session idle past wait_timeout (or
//     interactive_timeout) and rolled its transaction back; it sends the
//     error before closing, and the client reads it as the answer to its
//     next command. At COMMIT it proves that nothing was committed: the
//     server never read the COMMIT. MariaDB has the number for another
//     error, ER_REFERENCED_TRG_DOES_NOT_EXIST (CREATE TRIGGER … FOLLOWS a
//     trigger that does not exist), also with SQLSTATE HY000;
//     [IsConnectionLoss] tells it apart by its message.
//   - 1290: a server running with read_only (super_read_only for accounts
//     with SUPER or CONNECTION_ADMIN) refused a write, at COMMIT too.
//     1792: a write in a READ ONLY transaction.
//
// # By engine
//
// The same numbers by engine, with what the transaction engine of
// github.com/txretry/txretry/txretry makes of a COMMIT error that leaves
// the outcome unknown ("uncertain": not retried blindly, verified if a
// verifier is configured). go-sql-driver reports a connection lost during
// COMMIT as "invalid connection", with no error number.
//
//	Engine                   Retried by default       Opt-in                        Uncertain at COMMIT
//	MySQL (InnoDB)           1213                     1205                          a lost connection
//	MariaDB                  1213                     1205, 1020                    a lost connection
//	MariaDB Galera           1213 (certification)     1205                          a lost connection, a node dying during COMMIT
//	MySQL Group Replication  1213 (as MySQL)          1205, 3101                    a lost connection
//	TiDB                     1213 (pessimistic mode)  9007, 8002, 8005, 8022, 8028  a lost connection, TiDB's "result undetermined"
//
// Notes:
//
//   - 1213 rolls back the whole transaction on every engine above.
//   - Galera reports most certification failures at COMMIT; 1047 (a node
//     outside the Primary component) is not retried.
//   - TiDB's optimistic transactions report their conflicts at COMMIT.
//   - Seen on a real MariaDB Galera cluster (integration/engines): a
//     connection killed while its COMMIT waited for certification reached
//     the client as a lost connection, and the transaction was applied on
//     every node once certification finished; a node shut down during that
//     wait answered 1180 and applied nothing. Neither error tells the two
//     outcomes apart: both are uncertain at COMMIT.
//   - TiDB's "execution result undetermined" (its internal error
//     ErrResultUndetermined, class global, code 2: the store's answer to
//     committing the primary key was lost) never reaches the client as an
//     error number: TiDB's server closes the connection instead of sending
//     it (pkg/server/conn.go), so go-sql-driver reports "invalid
//     connection" and the commit is uncertain. Were it sent, it would carry
//     the number 2 (TiDB registers its code as the MySQL number), which
//     txretry counts as uncertain at COMMIT too.
//
// # MySQL and MariaDB, seen from the servers
//
// integration/scenarios (TestMySQLServerAnswers) provokes these on the
// MySQL-family server the tests get and checks them against this
// package's classes, per flavor. Seen from Oracle MySQL 9.7.4 (Debian's
// package) and MariaDB 10.11.19, through go-sql-driver v1.10.1 (read_only
// and SHUTDOWN on private servers, by hand):
//
//	Provoked                                   MySQL 9.7                         MariaDB 10.11
//	lock cycle                                 1213 (40001)                      the same
//	lock wait past innodb_lock_wait_timeout    1205 (HY000)                      the same
//	FOR UPDATE NOWAIT on a locked row          3572 (HY000)                      1205 (HY000)
//	SELECT @@innodb_snapshot_isolation         1193: no such variable            OFF (ON: see below)
//	RR update of a row changed since snapshot  no error, newest row changed      1020 with the variable ON
//	write in START TRANSACTION READ ONLY       1792 (25006)                      the same
//	KILL QUERY of a statement                  1317 (70100)                      the same
//	KILL CONNECTION, in a statement or idle    no error packet: ErrInvalidConn   the same
//	idle past wait_timeout, then COMMIT        4031 (HY000)                      no error packet: driver.ErrBadConn
//	write with read_only ON, COMMIT too        1290 (HY000)                      the same
//	statement waiting for a lock at SHUTDOWN   1053 (08S01)                      no error packet: ErrInvalidConn
//
// What each leaves of the transaction:
//
//   - 1213 and, on MariaDB, 1020 roll back the whole transaction: its
//     earlier writes are undone and the session is back in autocommit
//     mode.
//   - 1205 (innodb_rollback_on_timeout OFF, the default on both) rolls
//     back the statement only: the transaction and its earlier writes
//     stay, and so does 3572 and 1317.
//   - MariaDB answers NOWAIT with 1205, so a caller that adds
//     [IsLockWaitTimeout] retries MariaDB's NOWAIT failures too; MySQL's
//     3572 is in no class.
//   - MySQL has no innodb_snapshot_isolation: under REPEATABLE READ an
//     UPDATE of a row that another transaction changed and committed after
//     the snapshot changes the newest version with no error (a lost update
//     for a read-modify-write). MariaDB answers 1020 when the variable is
//     ON (the default from MariaDB 11.6.2, so in 11.8; OFF in 10.11).
//   - Turning read_only (or MySQL's super_read_only) on does not wait for
//     open write transactions, on either: their COMMIT then fails with
//     1290, and nothing is committed.
//   - During MySQL 9.7's SHUTDOWN (about 3 s), a statement waiting for a
//     lock got 1053, while a COMMIT that another session sent 1 s into it
//     committed and returned no error. MariaDB 10.11 closed every session
//     at once, with no error packet (ErrInvalidConn), and that COMMIT was
//     not applied.
//   - A KILL CONNECTION that reached a COMMIT in progress (MySQL 9.7, a
//     200,000-row transaction in "waiting for handler commit") gave
//     ErrInvalidConn; the transaction was rolled back each time it was
//     tried, but the client cannot tell that from a commit that finished
//     before the kill: uncertain.
//   - MySQL 9.7 refuses a placeholder in KILL (6413, "Dynamic parameters
//     can only be used in DML statements"; go-sql-driver prepares a
//     statement with arguments unless interpolateParams is set); MariaDB
//     accepts one.
//   - MySQL 9.7's root, created by --initialize-insecure, uses
//     caching_sha2_password; go-sql-driver logs in with no password and no
//     TLS, and with a password fetches the server's RSA key itself (it has
//     no allowPublicKeyRetrieval parameter: unknown parameters are sent as
//     system variables, which MySQL refuses with 1193).
//
// # Seen from a real server, or documentation only
//
// The integration tests (integration/engines) run against real MySQL,
// MariaDB, MariaDB Galera and TiDB servers. From TiDB (built from the
// source at integration/cluster/tidb.sh's TIDB_VERSION, unistore store)
// they saw:
//
//	1213  pessimistic mode, a lock cycle: "Deadlock found when trying to get lock; try restarting transaction"
//	9007  optimistic mode, at COMMIT: "Write conflict, txnStartTS=…, conflictStartTS=…, …, reason=Optimistic [try again later]"
//	9007  pessimistic mode under SERIALIZABLE (tidb_skip_isolation_level_check=1), before COMMIT, in a transaction that read (with or without FOR UPDATE) and wrote a row another one committed since it began: "… reason=PessimisticRetry [try again later]"
//	8028  at COMMIT, after another session's ALTER TABLE on a written table, with tidb_enable_metadata_lock=OFF (with it ON, the default, the DDL waits instead): "Information schema is changed during the execution of the statement(…). … [try again later]"
//	8022  at COMMIT, made by a TiDB failpoint (mockCommitError8942) that fails COMMIT before committing: "Error: KV error safe to retry %s [try again later]"
//
// Not provoked: TiDB's "result undetermined" (the failpoint of the embedded
// store that makes one leaves the server unable to reach its store, so what
// is said of it above comes from TiDB's source). Documentation only (never
// seen from a server here): TiDB's 8002 (TiDB
// returns it only from its own automatic retry of optimistic transactions,
// which current versions no longer let a session turn on:
// tidb_disable_txn_auto_retry = OFF is accepted with a warning and
// ignored), 8005 (raised by the local latches that TiDB's
// txn-local-latches setting enabled, a setting current versions no longer
// have); 8022 as TiKV's retryable key errors cause it, such as a commit
// whose lock another transaction has already resolved. MySQL Group
// Replication (3101 and its 1213) has never been run here: documentation
// only, as are CockroachDB and YugabyteDB in package pgerr.
//
// # Sources
//
//   - [MySQL-ERR]: MySQL Server Error Message Reference.
//   - [InnoDB-ERR]: MySQL Reference Manual, "InnoDB Error Handling".
//   - [MariaDB-ERR]: MariaDB Server documentation, "MariaDB Error Codes".
//   - [MariaDB-SI]: MariaDB Server documentation, InnoDB system variables,
//     innodb_snapshot_isolation.
//   - [Galera]: Galera Cluster documentation (certification failures
//     reported as deadlocks; node not ready).
//   - [MySQL-GR]: MySQL Reference Manual, "Group Replication".
//   - [TiDB-ERR]: TiDB documentation, "Error Codes and Troubleshooting".
//   - [TiDB-SRC]: TiDB's source: pkg/parser/terror (ErrResultUndetermined)
//     and pkg/server/conn.go (the connection closed instead of an error).
//
// [MySQL-ERR]: https://dev.mysql.com/doc/mysql-errors/8.4/en/server-error-reference.html
// [InnoDB-ERR]: https://dev.mysql.com/doc/refman/8.4/en/innodb-error-handling.html
// [MariaDB-ERR]: https://mariadb.com/docs/server/reference/error-codes
// [MariaDB-SI]: https://mariadb.com/docs/server/server-usage/storage-engines/innodb/innodb-system-variables
// [Galera]: https://galeracluster.com/library/documentation/
// [MySQL-GR]: https://dev.mysql.com/doc/refman/8.4/en/group-replication.html
// [TiDB-ERR]: https://docs.pingcap.com/tidb/stable/error-codes
package mysqlerr
