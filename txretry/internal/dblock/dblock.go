// Package dblock holds the SQL that txretry's adapters share: the database
// lock of the contention manager's lease (Lock) and PostgreSQL's lock
// timeout. It knows SQL text, not drivers: each adapter runs the
// statements on its own connection (Conn).
package dblock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"reflect"
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

// id is the lock id of key: FNV-1a 64 of "txretry:"+key, as a bigint, so
// that txretry's ids stay apart from ids an application derives from the
// same strings.
func id(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte("txretry:" + key))
	return int64(h.Sum64())
}

// name is the MySQL/MariaDB lock name of id: "txretry:" and 16 hex digits
// (within GET_LOCK's 64 characters). Keys never appear in it: lock names
// are visible to every session.
func name(id int64) string { return fmt.Sprintf("txretry:%016x", uint64(id)) }

// lockQuery takes the lock id, waiting at most until deadline (zero: none).
// Its row: 1 when taken (MySQL: 0 when the wait timed out; PostgreSQL:
// NULL when not run in the process pid that the connection announced, as
// behind PgBouncer), and the session's id.
func lockQuery(d Dialect, id int64, deadline, now time.Time, pid uint32) string {
	if d == MySQL {
		return "SELECT CASE WHEN GET_LOCK('" + name(id) + "', " + mysqlTimeout(deadline, now) +
			") = 1 THEN 1 ELSE 0 END, CONNECTION_ID()"
	}
	return "SELECT CASE WHEN pg_backend_pid() = " + strconv.FormatUint(uint64(pid), 10) +
		" THEN CASE WHEN pg_advisory_lock(" + strconv.FormatInt(id, 10) + ")::text IS NOT NULL THEN 1 END END, pg_backend_pid()"
}

// mysqlTimeout is GET_LOCK's timeout in seconds: what is left until the
// deadline (at least 1 ms: 0 does not wait), or a year. It ends the wait on
// the server, which does not notice the driver closing the connection.
func mysqlTimeout(deadline, now time.Time) string {
	if deadline.IsZero() {
		return "31536000"
	}
	s := max(deadline.Sub(now).Seconds(), 0.001)
	return strconv.FormatFloat(math.Ceil(s*1000)/1000, 'f', 3, 64)
}

// unlockQuery is the statement that releases id; it returns one row: 1 if
// the session held it, and the session's id.
func unlockQuery(d Dialect, id int64) string {
	if d == MySQL {
		return "SELECT COALESCE(RELEASE_LOCK('" + name(id) + "'), 0), CONNECTION_ID()"
	}
	return "SELECT pg_advisory_unlock(" + strconv.FormatInt(id, 10) + ")::int, pg_backend_pid()"
}

// ErrNoLease: the handle cannot lease now (no connection to spare, a
// driver that hides its server process); the domain goes without.
var ErrNoLease = errors.New("txretry: no lease on this handle")

// ErrNotSession: the lock statement ran in another server session than the
// connection's own, as behind PgBouncer, which cannot keep session locks.
var ErrNotSession = errors.New("txretry: a database lock needs a server session of its own")

// Conn is a connection taken from a pool to hold a lock.
type Conn interface {
	// Row runs a statement returning one row of two integers; a NULL
	// first column reads as -1.
	Row(ctx context.Context, query string) (a, b int64, err error)
	// Discard closes the connection and drops it from its pool, which
	// ends its session and with it the session's locks.
	Discard()
	// Done gives the connection back to its pool.
	Done()
}

// releaseTimeout bounds the release statement (txretry.DefaultCommitTimeout).
const releaseTimeout = 10 * time.Second

// Lock takes the exclusive lock of key on c, waiting no longer than ctx;
// pid is c's server process as announced at startup (PostgreSQL). Its
// release unlocks and gives c back, or discards c when the unlock fails or
// finds the lock gone. On failure c is discarded.
func Lock(ctx context.Context, c Conn, d Dialect, pid uint32, key string) (release func(), err error) {
	id := id(key)
	deadline, _ := ctx.Deadline()
	got, session, err := c.Row(ctx, lockQuery(d, id, deadline, time.Now(), pid))
	switch {
	case err != nil && ctx.Err() != nil:
		err = context.Cause(ctx)
	case err != nil:
	case got == -1:
		err = fmt.Errorf("%w (session %d, process %d announced)", ErrNotSession, session, pid)
	case got != 1: // GET_LOCK's timeout, which is ctx's deadline
		err = fmt.Errorf("txretry: waiting for a database lock: %w", context.DeadlineExceeded)
	}
	if err != nil {
		c.Discard()
		return nil, err
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		if n, s, err := c.Row(rctx, unlockQuery(d, id)); err != nil || n != 1 || s != session {
			c.Discard()
			return
		}
		c.Done()
	}, nil
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
