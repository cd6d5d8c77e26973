package txretry

// WithDatabaseKeyLocks makes the call's contention keys (WithContentionKeys)
// exclusive across processes too, through locks held by the database: each
// attempt takes one lock per key on the connection its transaction then
// runs on, before BEGIN (a lock taken inside a SERIALIZABLE or REPEATABLE
// READ transaction would come after its snapshot), in one fixed order, and
// releases them on that connection after COMMIT or ROLLBACK, on every path
// (an error or panic in fn, cancellation, an uncertain commit: a lost
// connection takes its locks with it). Replicas of a service that name the
// same keys then take turns on them instead of failing each other's
// transactions.
//
// PostgreSQL: session advisory locks, pg_advisory_lock(id) with id the
// FNV-1a 64 hash of "txretry:"+key; MySQL and MariaDB: GET_LOCK of
// "txretry:" and that hash in hex (keys themselves never reach the
// database or an error). The wait ends with the call's context, deadline
// and time budget; it comes after the key's turn inside the process, so
// each process has at most one caller per key waiting in the database.
//
// The locks need a session of their own: PgBouncer in transaction pooling
// mode cannot keep them. An attempt whose transaction runs on another
// server session than its locks fails with an error matching
// ErrInvalidOption that names the cause; the lock it took may stay on the
// pooler's server connection until that closes, so do not use the option
// there.
//
// Supported: RunInTx on a *sql.DB or *sql.Conn whose driver is pgx's
// stdlib, lib/pq or go-sql-driver/mysql, and pgxretry.RunInTx on a
// *pgxpool.Pool or *pgx.Conn; with another handle, driver or Adapter (one
// without BeginLocked), and without WithContentionKeys, the call fails with
// an error matching ErrInvalidOption before any attempt. Each attempt costs
// two to three more round trips (per key, lock; release; on PostgreSQL a
// session check inside the transaction). Default: off.
func WithDatabaseKeyLocks() Option {
	return func(c *config) { c.dbLocks = true }
}
