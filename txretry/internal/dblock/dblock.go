// Package dblock holds the SQL that txretry's adapters share: the database
// lock of the contention manager's lease (Lock) and PostgreSQL's lock
// timeout. It knows SQL text, not drivers: each adapter runs the
// statements in a transaction of its own.
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
	Unknown  Dialect = iota // a driver whose database is not known
	Postgres                // advisory locks, pg_advisory_xact_lock(bigint)
	MySQL                   // named locks, GET_LOCK (MySQL 5.7+, MariaDB 10.0.2+)
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

// lockQuery takes the lock id, waiting at most until deadline (zero: none);
// its one value is 1 when taken (MySQL: 0 when the wait timed out).
// PostgreSQL's lock is the transaction's, so that it ends with it even
// behind a pooler that hands the server session on (PgBouncer).
func lockQuery(d Dialect, id int64, deadline, now time.Time) string {
	if d == MySQL {
		return "SELECT CASE WHEN GET_LOCK('" + name(id) + "', " + mysqlTimeout(deadline, now) + ") = 1 THEN 1 ELSE 0 END"
	}
	return "SELECT 1 FROM pg_advisory_xact_lock(" + strconv.FormatInt(id, 10) + ")"
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

// ErrNoLease: the handle cannot lease now (no connection to spare beside
// the attempt's, or a database whose locks are not known); the domain goes
// without.
var ErrNoLease = errors.New("txretry: no lease on this handle")

// Lock takes the exclusive lock of key, waiting no longer than ctx, in a
// transaction on a connection of its own: query runs a statement of the
// transaction whose result is one integer, end rolls it back and gives the
// connection back (one that fails to roll back leaves its pool, which ends
// its session and what it held). The lock's release, like a failure, gives
// the lock back and calls end (MySQL's session lock first, by RELEASE_LOCK).
func Lock(ctx context.Context, d Dialect, key string, query func(context.Context, string) (int64, error), end func()) (release func(), err error) {
	id := id(key)
	deadline, _ := ctx.Deadline()
	got, err := query(ctx, lockQuery(d, id, deadline, time.Now()))
	switch {
	case err != nil && ctx.Err() != nil:
		err = context.Cause(ctx)
	case err == nil && got != 1: // GET_LOCK's timeout, which is ctx's deadline
		err = fmt.Errorf("txretry: waiting for a database lock: %w", context.DeadlineExceeded)
	}
	if err != nil {
		end()
		return nil, err
	}
	return func() {
		if d == MySQL { // bounded like a COMMIT (txretry.DefaultCommitTimeout)
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _ = query(rctx, "SELECT COALESCE(RELEASE_LOCK('"+name(id)+"'), 0)")
			cancel()
		}
		end()
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
	switch p := PkgPath(v); {
	case p == "github.com/lib/pq", p == "github.com/jackc/pgx/stdlib",
		strings.HasPrefix(p, "github.com/jackc/pgx/v") && strings.HasSuffix(p, "/stdlib"):
		return Postgres
	case p == "github.com/go-sql-driver/mysql":
		return MySQL
	}
	return Unknown
}

// PkgPath returns the path of the package that defines v's type (behind
// pointers), "" for nil or an unnamed type: how adapters tell a
// database/sql driver or driver connection without importing its package.
func PkgPath(v any) string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return ""
	}
	return t.PkgPath()
}
