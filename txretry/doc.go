// Package txretry runs a function in a database transaction, commits it, and
// re-runs the whole transaction when the database reports that it lost a race
// (a serialization failure or a deadlock). It works with database/sql
// (RunInTx: pgx's stdlib driver, go-sql-driver/mysql, any driver) and with
// pgx's native interface (package pgxretry), through one engine and one set
// of options. Adapters for sqlx, GORM and bun are nested modules of their
// own, so that the core brings none of them into a program's module graph:
// github.com/txretry/txretry/txretry/sqlxretry, .../gormretry and
// .../bunretry.
//
//	err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - $1 WHERE id = $2", amount, from)
//		return err
//	}, txretry.WithIsolation(sql.LevelSerializable))
//
// # When RunInTx retries
//
// An attempt is: BEGIN, fn, COMMIT (or ROLLBACK when fn returns an error).
// A new attempt is started only when all of these hold:
//
//   - the attempt's error is retryable by the classifier: by default
//     PostgreSQL SQLSTATE 40001 (serialization_failure; also CockroachDB's
//     and YugabyteDB's restart error) or 40P01 (deadlock_detected), or
//     MySQL/MariaDB error 1213 (ER_LOCK_DEADLOCK; also Galera certification
//     failures), found anywhere in the error's tree (%w and errors.Join).
//     WithRetryOn adds classes (see packages pgerr and mysqlerr for opt-in
//     ones); WithClassifier replaces the classifier. Under WithLockTimeout
//     (SERIALIZABLE and REPEATABLE READ on PostgreSQL: pgxretry's default,
//     50 ms; over database/sql armed by the handle's contention manager
//     once an attempt of 50 ms or more was lost), the 55P03 of a lock
//     wait that ran out of the timeout the attempt set is retried too,
//     whatever the classifier; NOWAIT's 55P03 is not. With
//     WithRetryOnConnectionLoss (off by default), so is a connection that
//     could not be made or broke before COMMIT was sent (refused, reset,
//     EOF, the server shutting down or starting up), waiting 50 ms to 1 s
//     between such attempts: a restart or a failover within the call's
//     deadline is ridden out;
//   - the error came from BEGIN, from fn, or from a COMMIT that the server
//     answered with an error (PostgreSQL raises 40001 at COMMIT under
//     SERIALIZABLE): such a COMMIT is a retry point like any statement;
//   - the attempt's transaction has been rolled back (or is gone with its
//     connection) and its connection returned: RunInTx never retries inside
//     a transaction and never waits while holding one;
//   - fewer than WithMaxAttempts attempts were made (default 100);
//   - the caller's context has not ended;
//   - the wait and one more attempt, judged by the shortest attempt of this
//     call so far, fit before the context's deadline and the time budget
//     (WithTimeBudget).
//
// Otherwise RunInTx returns: nil after a commit; fn's error unchanged (after
// rolling back) when it is not retryable; a *RetryError matching
// ErrRetriesExhausted and the last database error when retrying stopped for
// a limit; a *RetryError matching the context's error and the last database
// error when the context ended between attempts; the context's error alone
// when it ended before the first attempt.
//
// Between attempts RunInTx waits. By default each database handle has a
// ContentionManager, which keeps one conflict domain per kind of
// transaction: the calls with one WithConflictDomain or WithLabel name, or
// else the calls of one function fn (by its import path and name, a
// closure by its file and line). A domain whose transactions have not
// been conflicting costs nothing: its attempts go straight to the database
// and retry after the Backoff (default: full jitter over an exponential
// delay from 2 ms, capped at 250 ms). Once it conflicts, its first attempts
// still go straight in, its retries wait the domain's spacing (doubled by
// each conflict, shrunk by commits, 1 ms to 1 s) and a call's third attempt
// runs alone in the domain. When the spacing passes half a call's time, the
// domain closes a FIFO gate of its own, whose width then follows its
// commits per second; its retries keep their call's place, and a conflict that came
// from another process (no gated attempt of the manager overlapped it)
// pauses the caller in its place and, where the adapter can hold a
// database lock, makes the processes take turns on the domain through one
// (see ContentionManager). Other domains never
// queue behind it. Two kinds of transaction that conflict with each other
// are two domains: give them one label to queue them together. Without a
// manager (WithoutContentionManager) every retry waits the Backoff. A
// RetryBudget (WithRetryBudget, off by default) bounds retries across
// calls.
//
// # When RunInTx must not retry: uncertain commits
//
// A COMMIT that fails without a server answer (a closed connection, EOF, an
// I/O or timeout error, a context error while COMMIT was in flight) does not
// tell whether the server committed: the connection may have dropped after
// the commit record was written. RunInTx never re-runs fn after such an
// error. Without a verifier it returns a *CommitUncertainError matching
// ErrCommitUncertain and the driver's error. With a verifier (WithVerify,
// WithXactStatusVerification, WithCommitMarker, WithIdempotencyKey) it
// first establishes the outcome: committed means success, not committed
// means a normal retry.
//
// A COMMIT error counts as "not committed" only where that is proven:
//
//   - the server answered COMMIT with an error carrying a SQLSTATE,
//     except 40003 (statement_completion_unknown, CockroachDB's ambiguous
//     result), 08007 (transaction_resolution_unknown), class 08
//     (connection exception), 57P01, 57P02, 57P03 (shutdown) and 57014
//     (query_canceled), which stay uncertain; or a MySQL error number that
//     says the transaction was rolled back or COMMIT never ran: 1213, 1205,
//     3101, 1047, 1290, 1792, 4031 and TiDB's 8002, 8005, 8022, 8028, 9007
//     (every other number, 1053, 1180, 1317 and 1927 among them, stays
//     uncertain);
//   - an error the adapter marked with NotCommitted (ErrNotCommitted),
//     for what only its driver knows: pgx's ErrTxCommitRollback (the server
//     answered COMMIT with ROLLBACK because the transaction had already
//     failed), sql.ErrTxDone after fn ended the transaction itself;
//   - an error for which pgconn's SafeToRetry is true (nothing was sent);
//   - driver.ErrBadConn only from the drivers whose source shows that they
//     return it from COMMIT before sending it (below): database/sql's
//     contract says "did not perform the operation", but lib/pq returns it
//     after sending COMMIT.
//
// Everything else is uncertain. Per driver (the database/sql adapter, and
// those built on BeginSQLOn, tell a *sql.DB's or *sql.Conn's driver by the
// package of its type; the core module requires pgx v5.13.0 and
// go-sql-driver/mysql v1.10.1, so a program has those or later):
//
//   - pgx, native (pgxretry): the server's answer, SafeToRetry (pgconn
//     marks an error safe when it wrote nothing) and ErrTxCommitRollback.
//     pgx never returns driver.ErrBadConn.
//   - pgx v5's stdlib driver: the same. Its transaction's Commit is pgx's
//     (stdlib/sql.go, wrapTx.Commit calls pgx.Tx.Commit); stdlib returns
//     driver.ErrBadConn only from PrepareContext, BeginTx, ExecContext,
//     QueryContext, Ping and ResetSession, for a closed connection or a
//     SafeToRetry error, never from COMMIT.
//   - go-sql-driver/mysql: the server's answer (above) and
//     driver.ErrBadConn. Its COMMIT
//     (transaction.go, mysqlTx.Commit; connection.go, mysqlConn.exec)
//     returns it through markBadConn only for a write that sent no byte of
//     the command (packets.go, writePacket's errBadConnNoWrite), and from
//     handleErrorPacket for the server's refusal of a read-only server
//     (1290, 1792, 1836) under rejectReadOnly. A reply lost after sending
//     is ErrInvalidConn: uncertain.
//   - lib/pq (v1.10.9): the server's answer (an ERROR-level *pq.Error)
//     and ErrInFailedTransaction (conn.go, (*conn).Commit rolls back a
//     transaction the server reported failed instead of sending COMMIT).
//     driver.ErrBadConn is uncertain: error.go's (*conn).errRecover returns
//     it for io.EOF while reading COMMIT's reply and for every FATAL error
//     (57P01 of a shutdown included), after COMMIT was sent; a broken
//     socket is a *net.OpError, uncertain too. lib/pq waits for a stalled
//     reply after COMMIT's context ended (it sends a CancelRequest, which
//     a partition stops): bound its reads with a Dialer (Connector.Dialer)
//     whose connections set read deadlines.
//   - other drivers: the server's answer (a SQLSTATE or MySQL error
//     number), SafeToRetry, and what an adapter marks with NotCommitted;
//     driver.ErrBadConn is uncertain.
//
// With WithRetryOnConnectionLoss only a COMMIT error proven "not
// committed" can be retried without a verifier; an uncertain one never is.
//
// # Idempotency keys: exactly once across retries and crashes
//
// A verifier settles one call's lost COMMIT. A request can also be repeated
// from outside: a client that timed out sends it again, a replica that
// crashed after sending COMMIT has its requests taken over by another.
// WithIdempotencyKey(table, key) makes such repetitions harmless:
//
//  1. make the key at the edge, once per request, before any retry (the
//     client's request id, a UUID it sends with every repetition);
//  2. call RunInTx with WithIdempotencyKey: every attempt inserts the key
//     into table before fn, so the key commits with fn's effects or not at
//     all; in fn, store the request's result under the key (a receipt row);
//  3. on nil, answer with what fn computed (also when this call's COMMIT
//     was lost and the key's probe found this call's commit); on
//     ErrAlreadyCommitted (the key was committed by another call: an
//     earlier one, or a concurrent one, which this call waited for), fn's
//     work is done: load the stored result and answer with it.
//
// The key covers the database only: mail, messages and calls to other
// services made from fn can still happen more than once (write them to an
// outbox table in fn instead). Keep keys as long as a request can come
// back, typically days, then delete them with PurgeIdempotencyKeysSQL; a
// forgotten key runs its request again. The key replaces the other
// verifiers (combining them is ErrInvalidOption), cannot be used with
// WithReadOnly, and belongs to the outermost call: a nested call that
// would join an enclosing transaction rejects it. Keys are stored as they
// are only when short and lower-case; others are hashed (see
// IdempotencyKeyToken). No error, event or log of txretry's shows a key.
//
// # What the caller's context governs
//
// ctx governs BEGIN, fn's statements (fn receives a context derived from
// ctx and should pass it on), the waits between attempts and verification.
// It does not govern COMMIT: once fn has returned nil, COMMIT runs under its
// own timeout (WithCommitTimeout, default 10 s), even if ctx ends meanwhile,
// because a cancelled COMMIT is an uncertain one. For database/sql this
// means the transaction is begun on a context without ctx's cancellation
// (database/sql rolls a transaction back when its BeginTx context ends).
// BEGIN and the wait for a pooled connection still end with ctx: one still
// running is abandoned when ctx ends, and a transaction whose BEGIN
// returned after ctx ended is rolled back at once, before fn runs.
//
// # Nested calls
//
// RunInTx called inside fn, with the context fn received and on the same
// database handle, joins the outer transaction: its fn gets the outer
// transaction, and its options are checked but otherwise ignored
// (WithIdempotencyKey is refused: the key belongs to the outermost call).
// It never retries on its own: its errors are returned as they are, so that
// fn can return them and only the outermost call retries. A nested call on another
// handle is an independent transaction with its own retries. A call joins
// the nearest enclosing call on its handle, also across calls on other
// handles in between (db1, then db2, then db1 again: the third joins the
// first), which is the transaction TxOrDB(ctx, db1) returns there; inside
// it, Attempt and AfterCommit are the joined call's.
//
// # The transaction from the context
//
// TxOrDB(ctx, db) returns the *sql.Tx of the call on db that ctx is inside
// (fn's context or one derived from it), and db otherwise, as sqlc's DBTX:
// store.New(txretry.TxOrDB(ctx, db)) lets repository methods, written once,
// run in the caller's transaction when there is one. Calls on other
// handles are skipped, never taken for one on db. A context kept after fn
// returned still gives its attempt's transaction, now ended (sql.ErrTxDone),
// never db. pgxretry, sqlxretry, gormretry and bunretry have their own
// TxOrDB, built on TxFromContext and TxOrDB. The libraries built on
// database/sql share the *sql.DB's calls: each one's TxOrDB, inside
// another's call on the same *sql.DB, runs on that call's *sql.Tx.
//
// # Side effects after commit
//
// fn can run several times and its attempts can roll back, so a mail or a
// published event sent from fn can go out more than once, or for nothing.
// AfterCommit(ctx, f), called in fn, runs f once the call has committed:
// on the caller's goroutine before RunInTx returns nil, in registration
// order, with the caller's values but not its cancellation. The hooks of an
// attempt that rolls back or is retried are dropped, and none runs when the
// call returns an error, ErrCommitUncertain included: for effects that must
// survive a lost COMMIT, use a verifier, or an outbox table written in fn.
// A nested call that joined the outer transaction registers with the
// outermost call; outside any call f runs at once. A panicking hook does
// not stop the others, then goes on panicking (see AfterCommit). All
// adapters share this, since it lives in the engine.
//
// # Your own transaction type: Run and Adapter
//
// RunInTx and pgxretry.RunInTx are thin adapters over one generic entry,
// Run, which any transaction type can use (a query builder's, an ORM's, a
// store of your own): implement Tx (Commit and Rollback within a timeout,
// Exec for the commit marker) and an Adapter[T] with Begin, which starts
// one attempt's transaction, and Call, which runs your function on it.
// Small interfaces, found by type assertion, add the rest: AdapterHandle
// (nested calls join, and the handle gets a default ContentionManager, see
// ManagerFor), AdapterContentionManager, AdapterSingleConn,
// AdapterCheckTxOptions, AdapterLease (the processes take turns on a
// domain through a database lock; LeaseSQL on a *sql.DB),
// AdapterOverlapCommit (a turn's next attempt begins at COMMIT, on MySQL
// and MariaDB; OverlapCommitSQL) and AdapterFunc (the contention manager's
// conflict domain per function) on the adapter, and TxQueryString on the transaction (for
// WithXactStatusVerification). A Commit that knows its error proves
// nothing was committed wraps it with NotCommitted; other COMMIT errors
// are judged by the rules above. Adapters of libraries built on
// database/sql (sqlx, GORM, bun) get RunInTx's transaction handling from
// SQLTx, BeginSQLOn and CheckSQLTxOptions, as sqlxretry, gormretry and
// bunretry do. TxFromContext finds the running attempt's T for the
// adapter's TxOrDB. Run has RunInTx's options and semantics; see the Run
// example.
//
// # Panics and leaks
//
// A panic in fn rolls the transaction back, returns the connection to the
// pool and continues with the original value. Invalid options and arguments
// make RunInTx return an error matching ErrInvalidOption before any attempt.
//
// # Errors carry no row data
//
// Errors built by txretry (RetryError, CommitUncertainError) and observer
// events describe database errors by SQLSTATE or error number and Go type
// only (see Describe), never by the server's message, which can quote
// values. The wrapped errors stay reachable with errors.As.
package txretry
