package scenarios

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/txretry"
)

// Several pools on one database stand for the replicas of a service, each
// with its own txretry state (contention manager), so that only the
// database can make them take turns.

// replicaKind is a driver path that can be opened several times on one
// database.
type replicaKind struct {
	name      string
	fresh     func(t testing.TB) string                  // a fresh database's DSN
	on        func(t *testing.T, dsn string) *driverPath // a path on dsn
	sqlDriver string                                     // database/sql driver name, for the watch's sessions
}

var replicaKinds = []replicaKind{
	{name: "pgx-native", fresh: dbservertest.Postgres, on: pgxNativeOn, sqlDriver: "pgx"},
	{name: "pgx-stdlib", fresh: dbservertest.Postgres, on: pgxStdlibOn, sqlDriver: "pgx"},
	{name: "pq", fresh: dbservertest.Postgres, on: pqOn, sqlDriver: "pgx"},
	{name: "mysql", fresh: dbservertest.MySQL, on: mysqlOn, sqlDriver: "mysql"},
}

// lockWatch looks at the database's txretry locks from sessions of its own.
type lockWatch struct {
	db  *sql.DB
	pg  bool
	dsn string
}

func newLockWatch(t *testing.T, k replicaKind, dsn string) *lockWatch {
	db, err := sql.Open(k.sqlDriver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &lockWatch{db: db, pg: k.sqlDriver == "pgx", dsn: dsn}
}

// lockID and lockName are the documented mapping of a key, computed here
// independently of the library.
func lockID(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte("txretry:" + key))
	return int64(h.Sum64())
}

func lockName(key string) string { return fmt.Sprintf("txretry:%016x", uint64(lockID(key))) }

// held returns how many of the locks of keys some session holds.
func (w *lockWatch) held(ctx context.Context, keys ...string) (int, error) {
	n := 0
	for _, k := range keys {
		var used bool
		var err error
		if w.pg {
			id := uint64(lockID(k))
			err = w.db.QueryRowContext(ctx, `SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND granted
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND classid = $1 AND objid = $2 AND objsubid = 1`, int64(id>>32), int64(id&0xffffffff)).Scan(&used)
		} else {
			err = w.db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?) IS NOT NULL", lockName(k)).Scan(&used)
		}
		if err != nil {
			return 0, err
		}
		if used {
			n++
		}
	}
	return n, nil
}

// requireHeld fails t unless want of keys' locks are held within a few
// seconds (a server notices a closed session's end a little later).
func (w *lockWatch) requireHeld(t *testing.T, ctx context.Context, want int, keys ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := w.held(ctx, keys...)
		if err != nil {
			t.Fatalf("look at the locks: %v", err)
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lock(s) held, want %d", n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replicaPaths opens n paths of kind k on one fresh database, standing for
// n replicas, and returns the database's DSN.
func replicaPaths(t *testing.T, k replicaKind, n int) (string, []*driverPath) {
	dsn := k.fresh(t)
	paths := make([]*driverPath, n)
	for i := range paths {
		paths[i] = k.on(t, dsn)
	}
	return dsn, paths
}

// forEachReplicaKind runs body for each kind, then checks for leaked
// goroutines.
func forEachReplicaKind(t *testing.T, body func(t *testing.T, k replicaKind)) {
	opts := append([]goleak.Option{goleak.IgnoreCurrent()}, knownBackground...)
	for _, k := range replicaKinds {
		t.Run(k.name, func(t *testing.T) { body(t, k) })
	}
	goleak.VerifyNone(t, opts...)
}

// failures counts retryable failed attempts, by code.
type failures struct {
	mu    sync.Mutex
	codes map[string]int
	n     atomic.Int64
}

func (f *failures) option() txretry.Option {
	return txretry.WithObserver(txretry.ObserverFunc(func(_ context.Context, ev txretry.Event) {
		if ev.Kind == txretry.AttemptFailed && ev.Class == txretry.Retryable {
			f.n.Add(1)
			f.mu.Lock()
			if f.codes == nil {
				f.codes = map[string]int{}
			}
			f.codes[ev.Code]++
			f.mu.Unlock()
		}
	}))
}
