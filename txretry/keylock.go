package txretry

// WithDatabaseKeyLocks makes the call's contention keys (WithContentionKeys)
// exclusive across processes too, through locks held by the database, so
// that replicas of a service that name the same keys take turns on them
// instead of failing each other's transactions. Each attempt, once the keys
// are its own inside the process, takes one lock per key on the connection
// its transaction then runs on, before BEGIN (a lock taken inside a
// SERIALIZABLE or REPEATABLE READ transaction would come after its
// snapshot), all in one statement and one fixed order, and releases them on
// that connection after COMMIT or ROLLBACK, on every path: an error or a
// panic in fn, a cancellation, an uncertain commit (a lost connection takes
// its locks with it; a pool's connection whose release failed is closed).
//
// PostgreSQL: session advisory locks, pg_advisory_lock(id) with id the
// FNV-1a 64 hash of "txretry:"+key, in the current database; MySQL and
// MariaDB: GET_LOCK of "txretry:" and that hash in 16 hex digits, server
// wide. Keys never reach the database or an error. The wait ends with the
// call's context, deadline and time budget.
//
// The locks need a server session of their own. PgBouncer in transaction
// pooling mode, which lends a server session per transaction, cannot keep
// them: with pgx and pgx's stdlib driver the lock statement locks only in
// the server process the connection announced at startup, so behind
// PgBouncer (which announces one of its own, in any pooling mode) every
// call fails at its first attempt, before fn and without locking, with an
// error matching ErrInvalidOption that names the cause. With lib/pq, whose
// connections do not tell that process, the check runs inside the
// transaction, after locking: a lock may then stay on a pooler's server
// session.
//
// Supported: RunInTx on a *sql.DB or *sql.Conn whose driver is pgx's
// stdlib, lib/pq or go-sql-driver/mysql, and pgxretry.RunInTx on a
// *pgxpool.Pool or *pgx.Conn; with another handle, driver or Adapter (one
// without BeginLocked), or without WithContentionKeys, the call fails with
// an error matching ErrInvalidOption before any attempt. Each attempt costs
// two more statements (lock, release), and a *sql.DB's attempt holds its
// connection from the lock to the release. Default: off.
func WithDatabaseKeyLocks() Option {
	return func(c *config) { c.dbLocks = true }
}
