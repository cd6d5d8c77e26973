package dblock

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"strings"
	"testing"
	"time"
)

// The documented id: FNV-1a 64 over "txretry:"+key, as a signed bigint.
func TestIDIsFNV1aOfTheNamespacedKey(t *testing.T) {
	h := fnv.New64a()
	h.Write([]byte("txretry:account:42"))
	if got, want := id("account:42"), int64(h.Sum64()); got != want {
		t.Fatalf("id = %d, want %d", got, want)
	}
	long := strings.Repeat("Q", 1000)
	if n := name(id(long)); len(n) > 64 || strings.Contains(n, "Q") {
		t.Fatalf("name = %q: at most 64 characters, without the key", n)
	}
}

func TestStatementsHoldIdsNotKeys(t *testing.T) {
	i := id("user'); DROP TABLE t; --")
	for _, q := range []string{
		lockQuery(Postgres, i, time.Time{}, time.Time{}, 1), lockQuery(MySQL, i, time.Time{}, time.Time{}, 0),
		unlockQuery(Postgres, i), unlockQuery(MySQL, i),
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
		{now.Add(-time.Second), "0.001"}, // 0 would mean "do not wait"
	} {
		if q := lockQuery(MySQL, 1, tc.deadline, now, 0); !strings.Contains(q, ", "+tc.want+")") {
			t.Errorf("deadline %v: %s, want timeout %s", tc.deadline, q, tc.want)
		}
	}
	if q := lockQuery(Postgres, 5, time.Time{}, time.Time{}, 4242); !strings.Contains(q, "CASE WHEN pg_backend_pid() = 4242 THEN") {
		t.Fatalf("PostgreSQL's lock is not taken only in the announced process: %s", q)
	}
}

// fakeConn scripts the rows of the lock statements and logs them.
type fakeConn struct {
	log       []string
	lockRow   [3]int64 // got, session, and 1 for an error
	unlockRow [2]int64
}

var errConn = errors.New("connection broke")

func (c *fakeConn) Row(_ context.Context, q string) (int64, int64, error) {
	if strings.Contains(q, "unlock") || strings.Contains(q, "RELEASE") {
		c.log = append(c.log, "unlock")
		return c.unlockRow[0], c.unlockRow[1], nil
	}
	c.log = append(c.log, "lock")
	if c.lockRow[2] == 1 {
		return 0, 0, errConn
	}
	return c.lockRow[0], c.lockRow[1], nil
}
func (c *fakeConn) Discard() { c.log = append(c.log, "discard") }
func (c *fakeConn) Done()    { c.log = append(c.log, "done") }

// Lock gives the connection back after a clean unlock, and discards it on
// every failure and on an unlock that finds the lock gone or another
// session: the connection's end then ends what its session holds.
func TestLockGivesBackOrDiscardsItsConnection(t *testing.T) {
	for _, tc := range []struct {
		name      string
		lockRow   [3]int64
		unlockRow [2]int64
		is        error
		want      []string
	}{
		{"taken and released", [3]int64{1, 7}, [2]int64{1, 7}, nil, []string{"lock", "unlock", "done"}},
		{"released, lock gone", [3]int64{1, 7}, [2]int64{0, 7}, nil, []string{"lock", "unlock", "discard"}},
		{"released in another session", [3]int64{1, 7}, [2]int64{1, 8}, nil, []string{"lock", "unlock", "discard"}},
		{"another process (a pooler)", [3]int64{-1, 77}, [2]int64{}, ErrNotSession, []string{"lock", "discard"}},
		{"GET_LOCK timed out", [3]int64{0, 7}, [2]int64{}, context.DeadlineExceeded, []string{"lock", "discard"}},
		{"connection broke", [3]int64{0, 0, 1}, [2]int64{}, errConn, []string{"lock", "discard"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeConn{lockRow: tc.lockRow, unlockRow: tc.unlockRow}
			release, err := Lock(context.Background(), c, Postgres, 4242, "k")
			if !errors.Is(err, tc.is) || (err == nil) != (release != nil) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if release != nil {
				release()
			}
			if !slices.Equal(c.log, tc.want) {
				t.Fatalf("log %q, want %q", c.log, tc.want)
			}
		})
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
