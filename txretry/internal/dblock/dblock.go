// Package dblock holds the SQL that txretry's adapters share: the lease's
// lock (Lock) and PostgreSQL's lock timeout; the adapters run it.
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

// id is the lock id of key: FNV-1a 64 of "txretry:"+key, as a bigint.
func id(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte("txretry:" + key))
	return int64(h.Sum64())
}

// name is the MySQL/MariaDB lock name of id (keys are never visible).
func name(id int64) string { return fmt.Sprintf("txretry:%016x", uint64(id)) }

// lockQuery takes the lock id, waiting at most until deadline (zero: none);
// its value is 1 when taken. PostgreSQL's lock is the transaction's (for
// PgBouncer); MySQL's wait ends on the server (at least 1 ms: 0 does not
// wait), which does not notice the driver closing the connection.
func lockQuery(d Dialect, id int64, deadline, now time.Time) string {
	if d != MySQL {
		return "SELECT 1 FROM pg_advisory_xact_lock(" + strconv.FormatInt(id, 10) + ")"
	}
	t := "31536000" // a year
	if !deadline.IsZero() {
		t = strconv.FormatFloat(math.Ceil(max(deadline.Sub(now).Seconds(), 0.001)*1000)/1000, 'f', 3, 64)
	}
	return "SELECT CASE WHEN GET_LOCK('" + name(id) + "', " + t + ") = 1 THEN 1 ELSE 0 END"
}

// ErrNoLease: the handle cannot lease now; the domain goes without.
var ErrNoLease = errors.New("txretry: no lease on this handle")

// Lock takes the exclusive lock of key within ctx in a transaction of its
// own: query runs a statement of one integer; end rolls back and gives the
// connection back, ending its session unless ok (it may hold the lock). The
// release calls end, after MySQL's RELEASE_LOCK (bounded like a COMMIT).
func Lock(ctx context.Context, d Dialect, key string, query func(context.Context, string) (int64, error), end func(ok bool)) (release func(), err error) {
	id := id(key)
	deadline, _ := ctx.Deadline()
	got, err := query(ctx, lockQuery(d, id, deadline, time.Now()))
	if err == nil && got != 1 { // GET_LOCK's timeout, which is ctx's deadline
		end(true)
		return nil, fmt.Errorf("txretry: waiting for a database lock: %w", context.DeadlineExceeded)
	} else if err != nil {
		end(false)
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return nil, err
	}
	return func() {
		ok := true
		if d == MySQL {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := query(rctx, "SELECT COALESCE(RELEASE_LOCK('"+name(id)+"'), 0)")
			cancel()
			ok = err == nil
		}
		end(ok)
	}, nil
}

// SetLockTimeout returns PostgreSQL's statement that ends each lock wait of
// the transaction after d, rounded up to whole milliseconds (0: off).
func SetLockTimeout(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return "SET LOCAL lock_timeout = " + strconv.FormatInt(int64(ms), 10)
}

// Of returns the dialect of a database/sql driver or driver connection,
// from the package of its type.
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
