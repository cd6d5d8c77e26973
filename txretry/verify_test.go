package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// lostFirstCommit fails the first COMMIT as a connection lost while it was
// in flight: an uncertain outcome.
func lostFirstCommit(n int) error {
	if n == 1 {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// xactServer scripts the two queries of the xact-status verifier: the
// transaction id and server identity read before COMMIT, and the identity
// and pg_xact_status after an uncertain one, answered in turn from statuses
// (nil is SQL NULL; the last answer repeats).
type xactServer struct {
	xid      driver.Value // the id read before COMMIT; nil: none assigned
	statuses []driver.Value
	failover bool // the probe finds another timeline than COMMIT's server

	mu           sync.Mutex
	idQueries    int
	statusQuery  []string
	statusAsked  int
	otherQueries []string
}

func (s *xactServer) onQuery(_ context.Context, _ int, query string, _ []driver.NamedValue) ([]string, [][]driver.Value, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case strings.Contains(query, "pg_current_xact_id_if_assigned"):
		s.idQueries++
		if s.xid == nil {
			return []string{"id"}, [][]driver.Value{{nil}}, nil
		}
		return []string{"id"}, [][]driver.Value{{s.xid.(string) + "/7215/00000001"}}, nil
	case strings.Contains(query, "pg_xact_status"):
		s.statusQuery = append(s.statusQuery, query)
		v := s.statuses[min(s.statusAsked, len(s.statuses)-1)]
		s.statusAsked++
		if v == nil {
			v = "null" // coalesce(pg_xact_status(...), 'null')
		}
		identity := "7215/00000001"
		if s.failover {
			identity = "7215/00000002"
		}
		return []string{"status"}, [][]driver.Value{{identity + "/" + v.(string)}}, nil
	}
	s.otherQueries = append(s.otherQueries, query)
	return nil, nil, nil
}

// TestXactStatusVerifier: after an uncertain COMMIT, pg_xact_status decides
// with the id read before COMMIT. "committed" succeeds without re-running fn;
// "in progress" is polled until it turns into an answer (never taken for
// "aborted"); "aborted" re-runs fn; NULL is unresolved at once, and so is
// an answer from a server on another timeline (a promoted standby), even
// "committed"; a transaction without an id is re-run without asking; a
// read-only one never reads its id.
func TestXactStatusVerifier(t *testing.T) {
	for _, tc := range []struct {
		name       string
		srv        *xactServer
		readOnly   bool
		wantErr    error // nil: success
		wantCalls  int32
		wantIDs    int // id queries
		wantStatus int // pg_xact_status queries
	}{
		{"committed", &xactServer{xid: "731", statuses: []driver.Value{"committed"}}, false, nil, 1, 1, 1},
		{"in progress, then committed", &xactServer{xid: "731", statuses: []driver.Value{"in progress", "in progress", "committed"}}, false, nil, 1, 1, 3},
		{"in progress, then aborted", &xactServer{xid: "731", statuses: []driver.Value{"in progress", "aborted"}}, false, nil, 2, 2, 2},
		{"aborted re-runs", &xactServer{xid: "731", statuses: []driver.Value{"aborted"}}, false, nil, 2, 2, 1},
		{"NULL is unresolved at once", &xactServer{xid: "731", statuses: []driver.Value{nil}}, false, txretry.ErrCommitUncertain, 1, 1, 1},
		{"another timeline is unresolved at once", &xactServer{xid: "731", statuses: []driver.Value{"committed"}, failover: true}, false, txretry.ErrCommitUncertain, 1, 1, 1},
		{"no id: re-run without asking", &xactServer{xid: nil, statuses: []driver.Value{"committed"}}, false, nil, 2, 2, 0},
		{"read-only reads no id", &xactServer{xid: "731", statuses: []driver.Value{"committed"}}, true, nil, 2, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnQuery: tc.srv.onQuery, OnCommit: lostFirstCommit})
			opts := []txretry.Option{txretry.WithXactStatusVerification(), txretry.WithVerifyTimeout(2 * time.Second)}
			if tc.readOnly {
				opts = append(opts, txretry.WithReadOnly())
			}
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts(opts...)...)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			var ue *txretry.CommitUncertainError
			if tc.wantErr != nil && (!errors.As(err, &ue) || ue.Verifier != "xact-status" || ue.VerifyErr == nil) {
				t.Fatalf("err = %#v, want a CommitUncertainError from the xact-status verifier", err)
			}
			srv := tc.srv
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if calls.Load() != tc.wantCalls || srv.idQueries != tc.wantIDs || len(srv.statusQuery) != tc.wantStatus {
				t.Fatalf("fn ran %d times, %d id and %d status queries; want %d, %d, %d",
					calls.Load(), srv.idQueries, len(srv.statusQuery), tc.wantCalls, tc.wantIDs, tc.wantStatus)
			}
			for _, q := range srv.statusQuery {
				if !strings.Contains(q, "'731'") {
					t.Fatalf("status query %q does not ask about the id read before COMMIT", q)
				}
			}
			if len(srv.otherQueries) != 0 {
				t.Fatalf("unexpected queries %q", srv.otherQueries)
			}
		})
	}
}

// TestCommitMarkerVerifier: the marker row is inserted just before COMMIT;
// after an uncertain COMMIT the same INSERT is tried again in a probe
// transaction that is always rolled back. A duplicate key (PostgreSQL 23505,
// MySQL 1062) means committed; success means not committed and fn runs
// again (with a new token); any other error is retried and then reported
// as unresolved.
func TestCommitMarkerVerifier(t *testing.T) {
	dupPG := &fakedb.SQLStateError{Code: "23505", Message: "duplicate key"}
	dupMySQL := &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}
	for _, tc := range []struct {
		name      string
		probe     error // what the probe's INSERT returns
		wantErr   error // nil: success
		wantCalls int32
	}{
		{"duplicate key on PostgreSQL: committed", dupPG, nil, 1},
		{"duplicate key on MySQL: committed", dupMySQL, nil, 1},
		{"insert succeeds: not committed, re-run", nil, nil, 2},
		{"probe keeps failing: unresolved", io.EOF, txretry.ErrCommitUncertain, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu      sync.Mutex
				markers []string // marker INSERTs, in order
			)
			f := newFixture(t, &fakedb.Driver{
				OnCommit: lostFirstCommit,
				OnExec: func(_ context.Context, _ int, query string, _ []driver.NamedValue) error {
					if !strings.HasPrefix(query, "INSERT INTO app.markers ") {
						return nil
					}
					mu.Lock()
					defer mu.Unlock()
					markers = append(markers, query)
					if len(markers) >= 2 && markers[len(markers)-1] == markers[0] {
						return tc.probe // the probe repeats the lost attempt's token
					}
					return nil
				},
			})
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls),
				f.opts(txretry.WithCommitMarker("app.markers"), txretry.WithVerifyTimeout(500*time.Millisecond))...)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if calls.Load() != tc.wantCalls {
				t.Fatalf("fn ran %d times, want %d", calls.Load(), tc.wantCalls)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(markers) < 2 || markers[1] != markers[0] {
				t.Fatalf("marker inserts %q: want the probe to repeat the first attempt's token", markers)
			}
			if tc.wantCalls == 2 && markers[len(markers)-1] == markers[0] {
				t.Fatalf("marker inserts %q: the re-run must insert a new token", markers)
			}
			// Probes are rolled back; only attempts commit.
			st := f.drv.Stats()
			if st.Commits != int(tc.wantCalls) || st.ActiveTx != 0 {
				t.Fatalf("commits=%d active=%d, want %d commits (one per attempt, none by a probe) and no open transaction", st.Commits, st.ActiveTx, tc.wantCalls)
			}
		})
	}
}

// A read-only transaction writes no marker (PostgreSQL rejects the INSERT
// with 25006, MySQL with 1792, as the fake driver does here); after an
// uncertain commit it is re-run, since it wrote nothing.
func TestCommitMarkerSkipsReadOnlyTransactions(t *testing.T) {
	readOnlyWrite := &fakedb.SQLStateError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"}
	var inserts atomic.Int32
	f := newFixture(t, &fakedb.Driver{
		OnCommit: lostFirstCommit,
		OnExec: func(_ context.Context, _ int, query string, _ []driver.NamedValue) error {
			if strings.HasPrefix(query, "INSERT INTO app.markers ") {
				inserts.Add(1)
				return readOnlyWrite
			}
			return nil
		},
	})
	var calls atomic.Int32
	err := txretry.RunInTx(context.Background(), f.db, execFn(&calls),
		f.opts(txretry.WithReadOnly(), txretry.WithCommitMarker("app.markers"))...)
	if err != nil {
		t.Fatalf("read-only call with a commit marker: %v", err)
	}
	if n := inserts.Load(); n != 0 {
		t.Fatalf("%d marker INSERTs in a read-only transaction, want none", n)
	}
	if calls.Load() != 2 {
		t.Fatalf("fn ran %d times, want 2: the lost commit of a read-only transaction is re-run", calls.Load())
	}
}

func TestVerifyCallback(t *testing.T) {
	lost := errors.New("invalid connection")
	for _, tc := range []struct {
		name       string
		answers    []verifyAnswer
		wantErr    error // nil: success
		wantCalls  int32
		wantVerify int32
	}{
		{"committed", []verifyAnswer{{committed: true}}, nil, 1, 1},
		{"not committed re-runs", []verifyAnswer{{}}, nil, 2, 1},
		{"error then committed", []verifyAnswer{{err: io.EOF}, {err: io.EOF}, {committed: true}}, nil, 1, 3},
		{"always failing", []verifyAnswer{{err: io.EOF}}, txretry.ErrCommitUncertain, 1, -1},
		{"panicking", []verifyAnswer{{panics: true}}, txretry.ErrCommitUncertain, 1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnCommit: func(n int) error {
				if n == 1 {
					return lost
				}
				return nil
			}})
			var verifies atomic.Int32
			verify := func(ctx context.Context) (bool, error) {
				i := int(verifies.Add(1)) - 1
				a := tc.answers[min(i, len(tc.answers)-1)]
				if a.panics {
					panic("verifier bug")
				}
				return a.committed, a.err
			}
			var calls atomic.Int32
			err := txretry.RunInTx(context.Background(), f.db, execFn(&calls),
				f.opts(txretry.WithVerify(verify), txretry.WithVerifyTimeout(time.Second))...)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if calls.Load() != tc.wantCalls || (tc.wantVerify >= 0 && verifies.Load() != tc.wantVerify) {
				t.Fatalf("fn ran %d times, verify %d times; want %d, %d", calls.Load(), verifies.Load(), tc.wantCalls, tc.wantVerify)
			}
			var ue *txretry.CommitUncertainError
			if tc.wantErr != nil && (!errors.As(err, &ue) || ue.Verifier != "callback" || ue.VerifyErr == nil || !errors.Is(err, lost)) {
				t.Fatalf("err = %#v, want the commit error and the verifier's error", err)
			}
		})
	}
}

type verifyAnswer struct {
	committed bool
	err       error
	panics    bool
}

func TestVerifierBookkeepingIgnoresCancellationAfterFnReturned(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := txretry.RunInTx(ctx, f.db, func(ctx context.Context, tx *sql.Tx) error {
		cancel() // the caller goes away as fn returns
		return nil
	}, f.opts(txretry.WithCommitMarker("txretry_markers"))...)
	if err != nil || f.drv.Stats().Commits != 1 {
		t.Fatalf("err=%v commits=%d: the marker insert and COMMIT must not observe the cancellation", err, f.drv.Stats().Commits)
	}
}

// TestVerificationStaysWithinTheTimeBudgetAndContext: verifying an uncertain
// commit ends with the time budget or the caller's context, long before the
// verification timeout.
func TestVerificationStaysWithinTheTimeBudgetAndContext(t *testing.T) {
	blockingVerify := txretry.WithVerify(func(ctx context.Context) (bool, error) {
		<-ctx.Done()
		return false, ctx.Err()
	})
	for _, tc := range []struct {
		name   string
		opts   []txretry.Option
		cancel bool
	}{
		{"time budget", []txretry.Option{txretry.WithTimeBudget(50 * time.Millisecond)}, false},
		{"caller's cancellation", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakedb.Driver{OnCommit: lostFirstCommit})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				time.AfterFunc(50*time.Millisecond, cancel)
			}
			start := time.Now()
			var calls atomic.Int32
			err := txretry.RunInTx(ctx, f.db, execFn(&calls), f.opts(append(tc.opts, blockingVerify, txretry.WithVerifyTimeout(20*time.Second))...)...)
			if elapsed := time.Since(start); elapsed > 10*time.Second {
				t.Fatalf("verification took %v, want it cut short at about 50ms", elapsed)
			}
			var ue *txretry.CommitUncertainError
			if !errors.As(err, &ue) || ue.VerifyErr == nil || calls.Load() != 1 {
				t.Fatalf("err = %v after %d calls, want ErrCommitUncertain with the verifier's error after 1", err, calls.Load())
			}
		})
	}
}

func TestPurgeCommitMarkersSQL(t *testing.T) {
	got, err := txretry.PurgeCommitMarkersSQL("app.txretry_markers", 90*time.Minute+500*time.Millisecond)
	want := "DELETE FROM app.txretry_markers WHERE created_at < LOCALTIMESTAMP - INTERVAL '5400' SECOND"
	if err != nil || got != want {
		t.Fatalf("PurgeCommitMarkersSQL = %q, %v; want %q", got, err, want)
	}
	for _, tc := range []struct {
		name      string
		table     string
		olderThan time.Duration
	}{
		{"injection", "m; DROP TABLE users", time.Hour},
		{"empty table", "", time.Hour},
		{"quoted", `"m"`, time.Hour},
		{"under a second", "m", 999 * time.Millisecond},
		{"negative", "m", -time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := txretry.PurgeCommitMarkersSQL(tc.table, tc.olderThan); !errors.Is(err, txretry.ErrInvalidOption) || s != "" {
				t.Fatalf("PurgeCommitMarkersSQL(%q, %v) = %q, %v; want ErrInvalidOption", tc.table, tc.olderThan, s, err)
			}
		})
	}
}
