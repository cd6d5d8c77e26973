// Package keylock holds what txretry's adapters share to take database
// locks per contention key (txretry.WithDatabaseKeyLocks): the mapping of
// keys to lock ids, the statements of each dialect, the errors, and Begin,
// which takes the locks and begins the transaction after them. It knows SQL
// text, not drivers: each adapter runs the statements on its own
// connection (Conn).
package keylock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Dialect is the database's lock vocabulary.
type Dialect uint8

const (
	// Unknown: the driver is not one whose database is known.
	Unknown Dialect = iota
	// Postgres: session advisory locks, pg_advisory_lock(bigint).
	Postgres
	// MySQL: named locks, GET_LOCK(name, timeout) (MySQL 5.7+, MariaDB 10.0.2+).
	MySQL
)

// namespace prefixes every key before hashing, so that txretry's lock ids
// stay apart from ids an application derives from the same strings.
const namespace = "txretry:"

// id is the lock id of key: FNV-1a 64 of "txretry:"+key, as a bigint.
func id(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte(namespace))
	h.Write([]byte(key))
	return int64(h.Sum64())
}

// IDs returns the lock ids of keys, sorted and without duplicates: every
// caller takes its locks in that one order, so no two wait in a cycle, and
// two keys with one id are locked once.
func IDs(keys []string) []int64 {
	ids := make([]int64, len(keys))
	for i, k := range keys {
		ids[i] = id(k)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// name is the MySQL/MariaDB lock name of id: "txretry:" and 16 hex digits
// (24 characters, within GET_LOCK's 64). Keys never appear in it, since
// they may be user data and lock names are visible to every session.
func name(id int64) string {
	return namespace + fmt.Sprintf("%016x", uint64(id))
}

// lockQuery is the statement that takes the locks ids, one after the
// other in their order (nested CASEs fix the order of evaluation), waiting
// for each at most until deadline (zero: no deadline): one round trip
// whatever the number of keys. It returns one row: 1 when every lock was
// taken (MySQL: 0 when a wait timed out or failed; PostgreSQL: NULL when
// the session is not pid's) and the session's id (pg_backend_pid,
// CONNECTION_ID). On PostgreSQL with pid, the connection's backend process
// id as the server announced it at startup (0: unknown), nothing is locked
// unless the statement runs in that very process: behind a pooler such as
// PgBouncer, which announces an id of its own, no lock is taken. Ids and
// names are formatted into the text, never key strings.
func lockQuery(d Dialect, ids []int64, deadline, now time.Time, pid uint32) string {
	var cases []string
	end := " END"
	if d == MySQL {
		timeout := mysqlTimeout(deadline, now)
		for _, id := range ids {
			cases = append(cases, "CASE WHEN GET_LOCK('"+name(id)+"', "+timeout+") = 1 THEN ")
		}
		end = " ELSE 0 END"
	} else {
		if pid != 0 {
			cases = append(cases, "CASE WHEN pg_backend_pid() = "+strconv.FormatUint(uint64(pid), 10)+" THEN ")
		}
		for _, id := range ids {
			cases = append(cases, "CASE WHEN pg_advisory_lock("+strconv.FormatInt(id, 10)+")::text IS NOT NULL THEN ")
		}
	}
	return "SELECT " + strings.Join(cases, "") + "1" + strings.Repeat(end, len(cases)) + sessionColumn(d)
}

// mysqlTimeout is GET_LOCK's timeout in seconds: what is left until the
// deadline (at least a millisecond, so that 0 does not mean "do not
// wait"), or a year without one. The driver's cancellation closes the
// connection, which a server waiting in GET_LOCK does not notice; the
// timeout ends the wait on the server's side too.
func mysqlTimeout(deadline, now time.Time) string {
	if deadline.IsZero() {
		return "31536000"
	}
	s := max(deadline.Sub(now).Seconds(), 0.001)
	return strconv.FormatFloat(math.Ceil(s*1000)/1000, 'f', 3, 64)
}

// unlockQuery is the statement that releases ids, all of them whatever
// each one's result; it returns one row: how many this session held, and
// the session's id.
func unlockQuery(d Dialect, ids []int64) string {
	terms := make([]string, len(ids))
	for i, id := range ids {
		if d == MySQL {
			terms[i] = "COALESCE(RELEASE_LOCK('" + name(id) + "'), 0)"
		} else {
			terms[i] = "pg_advisory_unlock(" + strconv.FormatInt(id, 10) + ")::int"
		}
	}
	return "SELECT " + strings.Join(terms, " + ") + sessionColumn(d)
}

// sessionColumn is the lock statements' last column: the session's id.
func sessionColumn(d Dialect) string {
	if d == MySQL {
		return ", CONNECTION_ID()"
	}
	return ", pg_backend_pid()"
}

// SetLockTimeout returns PostgreSQL's statement that ends each lock wait of
// the transaction after d (txretry.WithLockTimeout), rounded up to whole
// milliseconds: lock_timeout counts milliseconds, and 0 would turn it off.
func SetLockTimeout(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return "SET LOCAL lock_timeout = " + strconv.FormatInt(int64(ms), 10)
}

// Of returns the dialect of a database/sql driver or driver connection,
// from the package that defines its type (drivers are not imported).
func Of(v any) Dialect {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return Unknown
	}
	switch p := t.PkgPath(); {
	case p == "github.com/lib/pq", p == "github.com/jackc/pgx/stdlib",
		strings.HasPrefix(p, "github.com/jackc/pgx/v") && strings.HasSuffix(p, "/stdlib"):
		return Postgres
	case p == "github.com/go-sql-driver/mysql":
		return MySQL
	}
	return Unknown
}

// BackendPID returns the backend process id that pgx's stdlib driver
// connection dc announced at startup (dc.Conn().PgConn().PID(), called by
// reflection so that no driver is imported), or 0.
func BackendPID(dc any) uint32 {
	v := reflect.ValueOf(dc)
	for _, name := range []string{"Conn", "PgConn", "PID"} {
		if !v.IsValid() || v.Kind() == reflect.Pointer && v.IsNil() {
			return 0
		}
		m := v.MethodByName(name)
		if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
			return 0
		}
		v = m.Call(nil)[0]
	}
	if v.Kind() != reflect.Uint32 {
		return 0
	}
	return uint32(v.Uint())
}

// ErrNotSession is matched by the error of an attempt whose locks were not
// held by the session that ran its transaction.
var ErrNotSession = errors.New("txretry: database key locks need a database session of their own: " +
	"the statements of the connection do not all run in its server session, " +
	"as behind PgBouncer in transaction pooling mode, which cannot keep session locks; " +
	"connect to the server directly, or drop WithDatabaseKeyLocks")

// notSession is ErrNotSession marked with base (txretry.ErrInvalidOption),
// naming the two session ids that differ (not the keys).
func notSession(base error, want, got int64) error {
	return fmt.Errorf("%w: %w (session %d expected, %d found)", base, ErrNotSession, want, got)
}

// Conn is an attempt's connection as the locks use it.
type Conn interface {
	// Row runs a statement returning one row of two integers; a NULL
	// first column reads as -1.
	Row(ctx context.Context, query string) (a, b int64, err error)
	// Owned reports a connection taken from a pool for the attempt.
	Owned() bool
	// Discard closes an owned connection and drops it from its pool,
	// which ends its session and with it the session's locks.
	Discard()
	// Done gives an owned connection back to its pool.
	Done()
}

// Locks are one attempt's database locks and their connection.
type Locks struct {
	Conn    Conn
	Dialect Dialect
	IDs     []int64 // sorted, see IDs
	Base    error   // marks a session change (txretry.ErrInvalidOption)
	// PID is the connection's backend process id as announced at startup
	// (PostgreSQL; 0 when the driver does not tell).
	PID     uint32
	session int64 // the session that took the locks
}

// Tx is a transaction that Begin began on the locks' connection.
type Tx interface {
	// Rollback rolls it back within timeout, not under ctx's cancellation.
	Rollback(ctx context.Context, timeout time.Duration) error
}

// Lock takes l's locks in one statement (lockQuery) whose waits end with
// ctx (the driver cancels it; GET_LOCK also gets ctx's deadline as its
// timeout). On failure it gives back what it took (Abandon).
func (l *Locks) Lock(ctx context.Context) error {
	deadline, _ := ctx.Deadline()
	got, s, err := l.Conn.Row(ctx, lockQuery(l.Dialect, l.IDs, deadline, time.Now(), l.PID))
	switch {
	case err != nil:
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
	case got == -1 && l.Dialect == Postgres:
		err = notSession(l.Base, int64(l.PID), s)
	case got != 1: // GET_LOCK's timeout, which is ctx's deadline
		err = fmt.Errorf("txretry: waiting for a database key lock: %w", context.DeadlineExceeded)
	}
	if err != nil {
		l.Abandon(ctx)
		return err
	}
	l.session = s
	return nil
}

// Begin takes l's locks (Lock), then begins the transaction on their
// connection with begin. On PostgreSQL without the connection's startup
// process id (with it, the lock statement proved the session the
// connection's own), it compares the session running the transaction,
// which session reads in it with the query given, with the locks':
// PgBouncer's transaction mode shows there. On any failure Begin gives
// back what it took: the transaction is rolled back, the locks abandoned.
// The caller releases the locks (Release) once the transaction has ended.
func Begin[T Tx](ctx context.Context, l *Locks, begin func(context.Context) (T, error),
	session func(ctx context.Context, tx T, query string) (int64, error)) (T, error) {
	var none T
	if err := l.Lock(ctx); err != nil {
		return none, err
	}
	tx, err := begin(ctx)
	if err == nil && l.Dialect == Postgres && l.PID == 0 {
		var s int64
		if s, err = session(ctx, tx, "SELECT pg_backend_pid()"); err == nil && s != l.session {
			err = notSession(l.Base, l.session, s)
		}
		if err != nil {
			_ = tx.Rollback(ctx, abortTimeout)
		}
	}
	if err != nil {
		l.Abandon(ctx)
		return none, err
	}
	return tx, nil
}

// Abandon gives the locks back after a failure: an owned connection is
// discarded (its session may hold a lock out of reach), a caller's one
// gets the unlock statement.
func (l *Locks) Abandon(ctx context.Context) {
	if l.Conn.Owned() {
		l.Conn.Discard()
		return
	}
	_ = l.Release(ctx, abortTimeout)
}

// abortTimeout bounds the rollback and release of a failed Begin: it is
// txretry.DefaultCommitTimeout (a transaction's end releases its locks
// within its own commit timeout).
const abortTimeout = 10 * time.Second

// Release unlocks every id on the connection, under timeout and not ctx's
// cancellation, then gives an owned connection back (discarding it when the
// unlock failed). It reports locks the session no longer held: a pooler
// moved the session, or fn released them.
func (l *Locks) Release(ctx context.Context, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	n, s, err := l.Conn.Row(rctx, unlockQuery(l.Dialect, l.IDs))
	if err == nil && (n != int64(len(l.IDs)) || s != l.session) {
		// The session changed (a pooler), or fn released them.
		err = fmt.Errorf("%w: %w (released %d of %d locks)", l.Base, ErrNotSession, n, len(l.IDs))
	}
	if l.Conn.Owned() {
		if err != nil {
			l.Conn.Discard()
		} else {
			l.Conn.Done()
		}
	}
	return err
}
