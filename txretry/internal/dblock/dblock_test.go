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
	for _, q := range []string{lockQuery(Postgres, i, time.Time{}, time.Time{}), lockQuery(MySQL, i, time.Time{}, time.Time{})} {
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
		if q := lockQuery(MySQL, 1, tc.deadline, now); !strings.Contains(q, ", "+tc.want+")") {
			t.Errorf("deadline %v: %s, want timeout %s", tc.deadline, q, tc.want)
		}
	}
	if q := lockQuery(Postgres, 5, time.Time{}, time.Time{}); !strings.Contains(q, "pg_advisory_xact_lock(5)") {
		t.Fatalf("PostgreSQL's lock is not the transaction's: %s", q)
	}
}

// fakeTx scripts the lock statement's result and logs the statements.
type fakeTx struct {
	log        []string
	got        int64
	fail       bool // the lock statement fails
	failUnlock bool // RELEASE_LOCK fails
}

var errConn = errors.New("connection broke")

func (c *fakeTx) Int(_ context.Context, q string) (int64, error) {
	if strings.Contains(q, "RELEASE") {
		c.log = append(c.log, "unlock")
		if c.failUnlock {
			return 0, errConn
		}
		return 1, nil
	}
	c.log = append(c.log, "lock")
	if c.fail {
		return 0, errConn
	}
	return c.got, nil
}
func (c *fakeTx) End(ok bool) {
	if ok {
		c.log = append(c.log, "end")
	} else {
		c.log = append(c.log, "end session")
	}
}

// Lock ends its transaction on every failure and at release; MySQL's
// session lock is released first, PostgreSQL's ends with the transaction.
// A session that may still hold the lock (the wait failed, or
// RELEASE_LOCK did) is ended, not given back to its pool.
func TestLockEndsItsTransaction(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Dialect
		tx   fakeTx
		is   error
		want []string
	}{
		{"PostgreSQL: taken and released", Postgres, fakeTx{got: 1}, nil, []string{"lock", "end"}},
		{"MySQL: taken and released", MySQL, fakeTx{got: 1}, nil, []string{"lock", "unlock", "end"}},
		{"GET_LOCK timed out", MySQL, fakeTx{got: 0}, context.DeadlineExceeded, []string{"lock", "end"}},
		{"connection broke", Postgres, fakeTx{fail: true}, errConn, []string{"lock", "end session"}},
		{"RELEASE_LOCK failed", MySQL, fakeTx{got: 1, failUnlock: true}, nil, []string{"lock", "unlock", "end session"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release, err := Lock(context.Background(), tc.d, "k", tc.tx.Int, tc.tx.End)
			if !errors.Is(err, tc.is) || (err == nil) != (release != nil) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if release != nil {
				release()
			}
			if !slices.Equal(tc.tx.log, tc.want) {
				t.Fatalf("log %q, want %q", tc.tx.log, tc.want)
			}
		})
	}
}
