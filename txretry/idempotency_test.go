package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// Bad tables, empty keys and combinations the key cannot honour give
// ErrInvalidOption before any attempt, and no message shows the key.
func TestIdempotencyKeyInvalid(t *testing.T) {
	const secret = "secret-key-of-a-user"
	for _, tc := range []struct {
		name string
		opts []txretry.Option
	}{
		{"empty table", []txretry.Option{txretry.WithIdempotencyKey("", secret)}},
		{"quoted table", []txretry.Option{txretry.WithIdempotencyKey("keys; DROP TABLE x", secret)}},
		{"digit first", []txretry.Option{txretry.WithIdempotencyKey("1keys", secret)}},
		{"three parts", []txretry.Option{txretry.WithIdempotencyKey("a.b.c", secret)}},
		{"empty key", []txretry.Option{txretry.WithIdempotencyKey("keys", "")}},
		{"twice", []txretry.Option{txretry.WithIdempotencyKey("keys", secret), txretry.WithIdempotencyKey("keys", secret+"2")}},
		{"marker after", []txretry.Option{txretry.WithIdempotencyKey("keys", secret), txretry.WithCommitMarker("markers")}},
		{"marker before", []txretry.Option{txretry.WithCommitMarker("markers"), txretry.WithIdempotencyKey("keys", secret)}},
		{"xact status", []txretry.Option{txretry.WithIdempotencyKey("keys", secret), txretry.WithXactStatusVerification()}},
		{"callback", []txretry.Option{txretry.WithVerify(func(context.Context) (bool, error) { return true, nil }), txretry.WithIdempotencyKey("keys", secret)}},
		{"read-only", []txretry.Option{txretry.WithReadOnly(), txretry.WithIdempotencyKey("keys", secret)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakedb.Driver{}
			db := d.DB()
			defer db.Close()
			ran := false
			err := txretry.RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error {
				ran = true
				return nil
			}, tc.opts...)
			if !errors.Is(err, txretry.ErrInvalidOption) {
				t.Fatalf("err = %v, want ErrInvalidOption", err)
			}
			if ran || d.Stats().Begins != 0 {
				t.Fatalf("ran=%v begins=%d, want no attempt", ran, d.Stats().Begins)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
}

// A nested call with a key on the same handle is rejected, not joined.
func TestIdempotencyKeyNestedRejected(t *testing.T) {
	d := &fakedb.Driver{}
	db := d.DB()
	defer db.Close()
	var inner error
	err := txretry.RunInTx(context.Background(), db, func(ctx context.Context, _ *sql.Tx) error {
		inner = txretry.RunInTx(ctx, db, func(context.Context, *sql.Tx) error { return nil },
			txretry.WithIdempotencyKey("keys", "k"))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inner, txretry.ErrInvalidOption) {
		t.Fatalf("nested err = %v, want ErrInvalidOption", inner)
	}
}

func TestIdempotencyKeyToken(t *testing.T) {
	long := strings.Repeat("a", 65)
	for _, tc := range []struct {
		key   string
		plain bool
	}{
		{"order-42", true},
		{"7f0c1a2e-5b3d-4c9e-8f00-0123456789ab", true},
		{"a.b:c_d", true},
		{strings.Repeat("a", 64), true},
		{long, false},
		{"Order-42", false}, // upper case: MySQL compares case-insensitively
		{"order 42", false},
		{"order'42", false},
		{"ключ", false},
		{"~" + strings.Repeat("0", 63), false},
	} {
		tok := txretry.IdempotencyKeyToken(tc.key)
		if tc.plain != (tok == tc.key) {
			t.Errorf("%q: token %q, plain=%v", tc.key, tok, tc.plain)
		}
		if !tc.plain && (len(tok) != 64 || tok[0] != '~' || strings.Trim(tok[1:], "0123456789abcdef") != "") {
			t.Errorf("%q: hashed token %q is not '~' and 63 hex digits", tc.key, tok)
		}
	}
	if txretry.IdempotencyKeyToken("Order-42") == txretry.IdempotencyKeyToken("order-42") {
		t.Error("keys differing in case share a token")
	}
	ddl, err := txretry.IdempotencyKeysDDL("idem_keys")
	if err != nil || !strings.Contains(ddl, "token VARCHAR(64) NOT NULL PRIMARY KEY") {
		t.Errorf("DDL = %q, %v", ddl, err)
	}
	if _, err := txretry.PurgeIdempotencyKeysSQL("bad name", 3600e9); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Errorf("purge with a bad name: %v", err)
	}
	if _, err := txretry.IdempotencyKeysDDL("bad name"); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Errorf("DDL with a bad name: %v", err)
	}
}

type outcomes []txretry.Event

func (o *outcomes) Observe(_ context.Context, e txretry.Event) { *o = append(*o, e) }

// The loop's policy, on the fake driver: a duplicate on the key's insert
// ends the call with ErrAlreadyCommitted before fn, is not an attempt
// failure, and is not retried; a serialization failure on the insert is
// retried.
func TestIdempotencyKeyPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dup    error
		execs  int // statements until the duplicate
		wantFn int
	}{
		{"pg duplicate", &fakedb.SQLStateError{Code: "23505"}, 1, 0},
		{"40001 then duplicate", &fakedb.SQLStateError{Code: "40001"}, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakedb.Driver{OnExec: func(_ context.Context, n int, q string, _ []driver.NamedValue) error {
				if !strings.HasPrefix(q, "INSERT INTO idem_keys (token) VALUES ('k1')") {
					t.Errorf("statement %q", q)
				}
				if n == 1 {
					return tc.dup
				}
				return &fakedb.SQLStateError{Code: "23505"}
			}}
			db := d.DB()
			defer db.Close()
			var ev outcomes
			fnRuns := 0
			err := txretry.RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error {
				fnRuns++
				return nil
			}, txretry.WithIdempotencyKey("idem_keys", "k1"), txretry.WithObserver(&ev), txretry.WithoutContentionManager())
			if !errors.Is(err, txretry.ErrAlreadyCommitted) || err != txretry.ErrAlreadyCommitted {
				t.Fatalf("err = %v, want ErrAlreadyCommitted", err)
			}
			if fnRuns != tc.wantFn || d.Stats().Execs != tc.execs || d.Stats().Commits != 0 {
				t.Fatalf("fn runs %d, execs %d, commits %d", fnRuns, d.Stats().Execs, d.Stats().Commits)
			}
			last := ev[len(ev)-1]
			if last.Kind != txretry.CallFinished || last.Outcome != txretry.AlreadyCommitted || last.Attempts != tc.execs {
				t.Fatalf("last event %+v", last)
			}
			if last.Outcome.String() != "already_committed" {
				t.Fatalf("outcome name %q", last.Outcome)
			}
			for _, e := range ev {
				if e.Kind == txretry.AttemptFailed && e.Code == "23505" {
					t.Fatalf("the duplicate was reported as a failed attempt: %+v", e)
				}
			}
		})
	}
}

// keyInsert matches the key's INSERT of an attempt: the key and the call's
// marker in one statement; probe matches the marker's INSERT alone.
var (
	keyInsert = regexp.MustCompile(`^INSERT INTO idem_keys \(token\) VALUES \('k1'\), \('(@[0-9a-f]{32})'\)$`)
	probe     = regexp.MustCompile(`^INSERT INTO idem_keys \(token\) VALUES \('(@[0-9a-f]{32})'\)$`)
)

// A lost COMMIT with a key, on the fake driver: the probe repeats the
// call's marker. A duplicate is this call's commit: nil after one run of
// fn. No duplicate means this call did not commit: it is retried, and the
// retry finds the key committed by another call (ErrAlreadyCommitted) or
// runs fn. A probe that keeps failing leaves the commit uncertain. No error
// shows the key or the marker.
func TestIdempotencyKeyLostCommit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		probe    error // the probe's answer
		keyTaken bool  // another call committed the key before the retry
		want     error // nil: success
		wantRuns int32
		verified txretry.Verification
		outcome  txretry.Outcome
	}{
		{"own commit, PostgreSQL", errUnique, false, nil, 1, txretry.VerifiedCommitted, txretry.Committed},
		{"own commit, MySQL", &mysql.MySQLError{Number: 1062, Message: "Duplicate entry '@x' for key 'PRIMARY'"}, false, nil, 1, txretry.VerifiedCommitted, txretry.Committed},
		{"another's commit", nil, true, txretry.ErrAlreadyCommitted, 1, txretry.VerifiedNotCommitted, txretry.AlreadyCommitted},
		{"no commit", nil, false, nil, 2, txretry.VerifiedNotCommitted, txretry.Committed},
		{"probe keeps failing", io.EOF, false, txretry.ErrCommitUncertain, 1, txretry.Unresolved, txretry.CommitUncertain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu             sync.Mutex
				claims, probes []string // the markers, in order
				otherCommitted bool
			)
			f := newFixture(t, &fakedb.Driver{
				OnCommit: lostFirstCommit,
				OnExec: func(_ context.Context, _ int, q string, _ []driver.NamedValue) error {
					mu.Lock()
					defer mu.Unlock()
					if m := keyInsert.FindStringSubmatch(q); m != nil {
						claims = append(claims, m[1])
						if otherCommitted {
							return errUnique
						}
					} else if m := probe.FindStringSubmatch(q); m != nil {
						probes = append(probes, m[1])
						otherCommitted = tc.keyTaken
						return tc.probe
					} else if q != "UPDATE t SET v = v + 1" {
						t.Errorf("statement %q", q)
					}
					return nil
				},
			})
			var ev outcomes
			var runs atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&runs), f.opts(txretry.WithIdempotencyKey("idem_keys", "k1"),
				txretry.WithObserver(&ev), txretry.WithVerifyTimeout(500*time.Millisecond))...)
			if tc.want == nil && err != nil || !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.want == txretry.ErrAlreadyCommitted && err != txretry.ErrAlreadyCommitted { //nolint:errorlint // the plain sentinel
				t.Fatalf("err = %#v, want the plain sentinel", err)
			}
			if runs.Load() != tc.wantRuns {
				t.Fatalf("fn ran %d times, want %d", runs.Load(), tc.wantRuns)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(probes) == 0 || len(claims) == 0 || probes[0] != claims[0] {
				t.Fatalf("claims %q, probes %q: want the probe to repeat the call's marker", claims, probes)
			}
			if err != nil && (strings.Contains(err.Error(), "k1") || strings.Contains(err.Error(), claims[0])) {
				t.Fatalf("the error shows the key or the marker: %v", err)
			}
			var verified []txretry.Verification
			for _, e := range ev {
				if e.Kind == txretry.CommitVerified {
					verified = append(verified, e.Verification)
				}
			}
			if len(verified) != 1 || verified[0] != tc.verified {
				t.Fatalf("verifications %v, want [%v]", verified, tc.verified)
			}
			if last := ev[len(ev)-1]; last.Kind != txretry.CallFinished || last.Outcome != tc.outcome {
				t.Fatalf("last event %+v, want outcome %v", last, tc.outcome)
			}
		})
	}
}

// Every call has its own marker, also when calls share one Option value.
func TestIdempotencyKeyMarkerPerCall(t *testing.T) {
	var markers []string
	d := &fakedb.Driver{OnExec: func(_ context.Context, _ int, q string, _ []driver.NamedValue) error {
		if m := keyInsert.FindStringSubmatch(q); m != nil {
			markers = append(markers, m[1])
		}
		return nil
	}}
	db := d.DB()
	defer db.Close()
	opt := txretry.WithIdempotencyKey("idem_keys", "k1")
	for range 2 {
		if err := txretry.RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error { return nil }, opt); err != nil {
			t.Fatal(err)
		}
	}
	if len(markers) != 2 || markers[0] == markers[1] {
		t.Fatalf("markers %q: want one new marker per call", markers)
	}
}
