package keylock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var errBase = errors.New("invalid option")

// The documented id: FNV-1a 64 over "txretry:"+key, as a signed bigint.
func TestIDIsFNV1aOfTheNamespacedKey(t *testing.T) {
	h := fnv.New64a()
	h.Write([]byte("txretry:account:42"))
	if got, want := id("account:42"), int64(h.Sum64()); got != want {
		t.Fatalf("ID = %d, want %d", got, want)
	}
	ids := IDs([]string{"b", "a", "b", "c"})
	if len(ids) != 3 || !slices.IsSorted(ids) {
		t.Fatalf("IDs = %v, want 3 sorted ids", ids)
	}
	long := strings.Repeat("Q", 1000)
	if n := name(id(long)); len(n) > 64 || strings.Contains(n, "Q") {
		t.Fatalf("Name = %q: at most 64 characters, without the key", n)
	}
}

func TestStatementsHoldIdsNotKeys(t *testing.T) {
	ids := IDs([]string{"user'); DROP TABLE t; --"})
	for _, q := range []string{
		lockQuery(Postgres, ids, time.Time{}, time.Time{}, 0), lockQuery(MySQL, ids, time.Time{}, time.Time{}, 0),
		unlockQuery(Postgres, ids), unlockQuery(MySQL, ids),
	} {
		if strings.Contains(q, "DROP") {
			t.Fatalf("statement holds the key: %s", q)
		}
	}
	now := time.Now()
	for _, tc := range []struct {
		deadline time.Time
		want     string
	}{
		{time.Time{}, "31536000"},
		{now.Add(1500 * time.Millisecond), "1.500"},
		{now.Add(-time.Second), "0.001"}, // 0 would mean "do not wait": the deadline error comes from GET_LOCK's 0
	} {
		if q := lockQuery(MySQL, []int64{1}, tc.deadline, now, 0); !strings.Contains(q, ", "+tc.want+")") {
			t.Errorf("deadline %v: %s, want timeout %s", tc.deadline, q, tc.want)
		}
	}
}

// fakeConn scripts the rows of the lock statements and logs them.
type fakeConn struct {
	owned     bool
	log       []string
	lockRow   func(n int) (int64, int64, error)
	unlockRow func() (int64, int64, error)
	locks     int
}

func (c *fakeConn) Row(_ context.Context, q string) (int64, int64, error) {
	if strings.Contains(q, "unlock") || strings.Contains(q, "RELEASE") {
		c.log = append(c.log, "unlock "+fmt.Sprint(strings.Count(q, "unlock")))
		if c.unlockRow != nil {
			return c.unlockRow()
		}
		return int64(strings.Count(q, "unlock")), 7, nil
	}
	c.locks++
	c.log = append(c.log, "lock")
	if c.lockRow != nil {
		return c.lockRow(c.locks)
	}
	return 1, 7, nil
}
func (c *fakeConn) Owned() bool { return c.owned }
func (c *fakeConn) Discard()    { c.log = append(c.log, "discard") }
func (c *fakeConn) Done()       { c.log = append(c.log, "done") }

// fakeTx is a transaction begun on a fakeConn.
type fakeTx struct{ c *fakeConn }

func (t fakeTx) Rollback(context.Context, time.Duration) error {
	t.c.log = append(t.c.log, "rollback")
	return nil
}

// begin runs Begin on l, whose Conn is c: BEGIN fails with beginErr, and
// the session check, logged, reads session.
func begin(l *Locks, c *fakeConn, beginErr error, session int64) (fakeTx, error) {
	return Begin(context.Background(), l, func(context.Context) (fakeTx, error) {
		c.log = append(c.log, "begin")
		if beginErr != nil {
			return fakeTx{}, beginErr
		}
		return fakeTx{c}, nil
	}, func(_ context.Context, tx fakeTx, q string) (int64, error) {
		c.log = append(c.log, q)
		return session, nil
	})
}

func TestLocksGiveBackWhatTheyTookOnEveryFailure(t *testing.T) {
	keys := []string{"a", "b", "c"}
	cancelled := func(int) (int64, int64, error) { return 0, 0, context.Canceled }
	errBegin := errors.New("BEGIN failed")
	const check = "SELECT pg_backend_pid()"
	for _, tc := range []struct {
		name     string
		owned    bool
		lockRow  func(n int) (int64, int64, error)
		beginErr error
		session  int64 // what the session check reads
		want     []string
		is       error
	}{
		{"all taken, released", false, nil, nil, 7, []string{"lock", "begin", check, "unlock 3"}, nil},
		{"pool conn, released and given back", true, nil, nil, 7, []string{"lock", "begin", check, "unlock 3", "done"}, nil},
		{"cancelled, caller's conn: every lock released", false, cancelled, nil, 7, []string{"lock", "unlock 3"}, context.Canceled},
		{"cancelled, pool conn: discarded", true, cancelled, nil, 7, []string{"lock", "discard"}, context.Canceled},
		{"GET_LOCK timed out", false, func(int) (int64, int64, error) { return 0, 7, nil }, nil, 7,
			[]string{"lock", "unlock 3"}, context.DeadlineExceeded},
		{"BEGIN failed, caller's conn", false, nil, errBegin, 7, []string{"lock", "begin", "unlock 3"}, errBegin},
		{"BEGIN failed, pool conn", true, nil, errBegin, 7, []string{"lock", "begin", "discard"}, errBegin},
		{"transaction in another session, caller's conn", false, nil, nil, 8,
			[]string{"lock", "begin", check, "rollback", "unlock 3"}, ErrNotSession},
		{"transaction in another session, pool conn", true, nil, nil, 8,
			[]string{"lock", "begin", check, "rollback", "discard"}, ErrNotSession},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeConn{owned: tc.owned, lockRow: tc.lockRow}
			l := &Locks{Conn: c, Dialect: Postgres, IDs: IDs(keys), Base: errBase}
			tx, err := begin(l, c, tc.beginErr, tc.session)
			if tc.is == nil {
				if err != nil || tx.c != c {
					t.Fatal(err)
				}
				err = l.Release(context.Background(), time.Second)
			} else if tx.c != nil {
				t.Fatal("a failed Begin returned a transaction")
			}
			if !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if !slices.Equal(c.log, tc.want) {
				t.Fatalf("log %q, want %q", c.log, tc.want)
			}
		})
	}
}

// One statement takes every lock, nested so that they are taken in the
// ids' order.
func TestLockQueryTakesTheLocksInOrder(t *testing.T) {
	ids := IDs([]string{"a", "b", "c"})
	for _, d := range []Dialect{Postgres, MySQL} {
		q := lockQuery(d, ids, time.Time{}, time.Time{}, 0)
		last := -1
		for _, id := range ids {
			s := strconv.FormatInt(id, 10)
			if d == MySQL {
				s = name(id)
			}
			i := strings.Index(q, s)
			if i <= last {
				t.Fatalf("%v: id %d out of order in %s", d, id, q)
			}
			last = i
		}
	}
}

// A release that finds fewer locks, or another session, reports the
// pooler; a pool connection is then discarded, not given back.
func TestReleaseReportsLostLocks(t *testing.T) {
	for _, row := range [][2]int64{{1, 7}, {2, 8}} {
		c := &fakeConn{owned: true, unlockRow: func() (int64, int64, error) { return row[0], row[1], nil }}
		l := &Locks{Conn: c, Dialect: Postgres, IDs: IDs([]string{"a", "b"}), Base: errBase}
		if _, err := begin(l, c, nil, 7); err != nil {
			t.Fatal(err)
		}
		err := l.Release(context.Background(), time.Second)
		if !errors.Is(err, ErrNotSession) || !errors.Is(err, errBase) {
			t.Fatalf("row %v: err = %v, want ErrNotSession", row, err)
		}
		if c.log[len(c.log)-1] != "discard" {
			t.Fatalf("row %v: log %q, want a discard", row, c.log)
		}
	}
}

type fakeStdlibConn struct{ c *fakePgxConn }
type fakePgxConn struct{ pc *fakePgConn }
type fakePgConn struct{ pid uint32 }

func (c *fakeStdlibConn) Conn() *fakePgxConn { return c.c }
func (c *fakePgxConn) PgConn() *fakePgConn   { return c.pc }
func (c *fakePgConn) PID() uint32            { return c.pid }

func TestBackendPIDFollowsPgxStdlibsMethods(t *testing.T) {
	if got := BackendPID(&fakeStdlibConn{&fakePgxConn{&fakePgConn{pid: 4242}}}); got != 4242 {
		t.Fatalf("BackendPID = %d, want 4242", got)
	}
	for _, dc := range []any{nil, 7, &fakeStdlibConn{}, &fakeStdlibConn{&fakePgxConn{}}, (*fakeStdlibConn)(nil)} {
		if got := BackendPID(dc); got != 0 {
			t.Fatalf("BackendPID(%#v) = %d, want 0", dc, got)
		}
	}
}

// With the connection's startup process id, the lock statement locks only
// in that process; a NULL answer (another process: a pooler) takes nothing
// and fails with ErrNotSession, and no transaction check is needed.
func TestLockRefusesAnotherProcess(t *testing.T) {
	if q := lockQuery(Postgres, []int64{5}, time.Time{}, time.Time{}, 4242); !strings.Contains(q, "CASE WHEN pg_backend_pid() = 4242 THEN") {
		t.Fatalf("query %s", q)
	}
	c := &fakeConn{owned: true, lockRow: func(int) (int64, int64, error) { return -1, 77, nil }}
	l := &Locks{Conn: c, Dialect: Postgres, IDs: IDs([]string{"a"}), Base: errBase, PID: 4242}
	if _, err := begin(l, c, nil, 77); !errors.Is(err, ErrNotSession) || !errors.Is(err, errBase) || !strings.Contains(err.Error(), "PgBouncer") {
		t.Fatalf("err = %v, want ErrNotSession naming PgBouncer", err)
	}
	if !slices.Equal(c.log, []string{"lock", "discard"}) {
		t.Fatalf("log %q", c.log)
	}
	// The session check runs only on PostgreSQL without a startup process
	// id.
	for _, l := range []*Locks{{Dialect: Postgres, PID: 4242}, {Dialect: MySQL}} {
		c := &fakeConn{}
		l.Conn, l.IDs, l.Base = c, IDs([]string{"a"}), errBase
		if _, err := begin(l, c, nil, 99); err != nil || !slices.Equal(c.log, []string{"lock", "begin"}) {
			t.Fatalf("%+v: err %v, log %q, want no session check", l, err, c.log)
		}
	}
}

// SetLockTimeout rounds up to whole milliseconds, never to 0 (which would
// turn lock_timeout off).
func TestSetLockTimeoutRoundsUpToMilliseconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		50 * time.Millisecond:   "SET LOCAL lock_timeout = 50",
		1500 * time.Microsecond: "SET LOCAL lock_timeout = 2",
		time.Nanosecond:         "SET LOCAL lock_timeout = 1",
		2 * time.Second:         "SET LOCAL lock_timeout = 2000",
	} {
		if got := SetLockTimeout(d); got != want {
			t.Errorf("SetLockTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}
