package txretry_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// TestNestedCallChecksItsOptions: a nested call joins the outer transaction
// and ignores its options, but still rejects invalid ones.
func TestNestedCallChecksItsOptions(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	var inner atomic.Int32
	var innerErr error
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		innerErr = txretry.RunInTx(ctx, f.db, func(context.Context, *sql.Tx) error {
			inner.Add(1)
			return nil
		}, txretry.WithMaxAttempts(0))
		return nil
	}, f.opts()...)
	if err != nil || !errors.Is(innerErr, txretry.ErrInvalidOption) || inner.Load() != 0 {
		t.Fatalf("outer err=%v inner err=%v inner fn runs=%d, want nil, ErrInvalidOption, 0", err, innerErr, inner.Load())
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

// TestOptionsStayWithTheirCall: calls without options share one default
// configuration, and a call with options, before or between them, must not
// change it.
func TestOptionsStayWithTheirCall(t *testing.T) {
	db := (&fakedb.Driver{OnExec: failFirst(1<<30, errSerialization)}).DB()
	defer db.Close()
	for _, tc := range []struct {
		opts []txretry.Option
		want int32
	}{
		{nil, txretry.DefaultMaxAttempts},
		{[]txretry.Option{txretry.WithMaxAttempts(2), txretry.WithoutContentionManager(), txretry.WithBackoff(txretry.Constant(0))}, 2},
		{nil, txretry.DefaultMaxAttempts},
		{[]txretry.Option{txretry.WithMaxAttempts(3)}, 3},
		{nil, txretry.DefaultMaxAttempts},
	} {
		var calls atomic.Int32
		err := txretry.RunInTx(context.Background(), db, execFn(&calls), tc.opts...)
		if !errors.Is(err, txretry.ErrRetriesExhausted) || calls.Load() != tc.want {
			t.Fatalf("with %d options: err = %v after %d attempts, want exhaustion after %d", len(tc.opts), err, calls.Load(), tc.want)
		}
	}
}
