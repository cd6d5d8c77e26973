package txretry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// Tests of Run with adapters of the tests' own (storeAdapter from
// example_test.go, and the ones below).

func noop(context.Context, *storeTx) error { return nil }

// ptrAdapter is an adapter with a pointer receiver, whose nil is a typed nil.
type ptrAdapter struct{ storeAdapter }

// nilTxAdapter's Begin returns no transaction and no error.
type nilTxAdapter struct{ storeAdapter }

func (nilTxAdapter) Begin(context.Context, txretry.TxOptions) (*storeTx, error) { return nil, nil }

func TestRunRejectsBadAdaptersWithoutPanicking(t *testing.T) {
	s := new(store)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"nil adapter", func() error { return txretry.Run[*storeTx](context.Background(), nil) }},
		{"typed nil adapter", func() error { return txretry.Run[*storeTx](context.Background(), (*ptrAdapter)(nil)) }},
		{"nil handle", func() error { return txretry.Run(context.Background(), storeAdapter{fn: noop}) }},
		{"nil transaction", func() error {
			return txretry.Run(context.Background(), nilTxAdapter{storeAdapter{s: s, fn: noop}}, txretry.WithMaxAttempts(1))
		}},
		{"xact status without QueryString", func() error {
			return txretry.Run(context.Background(), storeAdapter{s: s, fn: noop}, txretry.WithXactStatusVerification())
		}},
		{"nil ctx", func() error { return txretry.Run(nil, storeAdapter{s: s, fn: noop}) }}, //nolint:staticcheck // testing bad input
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, txretry.ErrInvalidOption) {
				t.Fatalf("err = %v, want ErrInvalidOption", err)
			}
		})
	}
	if s.version != 0 {
		t.Fatalf("%d commits for invalid calls", s.version)
	}
}

// A nested Run on the same handle joins the outer transaction; one whose
// transaction type differs cannot, and says so.
func TestRunNestedOnTheSameHandle(t *testing.T) {
	s := new(store)
	var inner *storeTx
	err := txretry.Run(context.Background(), storeAdapter{s: s, fn: func(ctx context.Context, tx *storeTx) error {
		if err := txretry.Run(ctx, storeAdapter{s: s, fn: func(ctx context.Context, tx *storeTx) error {
			inner = tx
			return nil
		}}); err != nil {
			return err
		}
		if inner != tx {
			t.Error("the nested call got a transaction of its own")
		}
		err := txretry.Run(ctx, otherAdapter{s: s})
		if !errors.Is(err, txretry.ErrInvalidOption) {
			t.Errorf("nested call with another transaction type: %v, want ErrInvalidOption", err)
		}
		return nil
	}})
	if err != nil || s.version != 1 {
		t.Fatalf("err = %v, %d commits; want one", err, s.version)
	}
}

// otherTx is another transaction type on store's handle.
type otherTx struct{ storeTx }

type otherAdapter struct{ s *store }

func (a otherAdapter) Begin(context.Context, txretry.TxOptions) (*otherTx, error) {
	return &otherTx{storeTx{s: a.s}}, nil
}
func (otherAdapter) Call(context.Context, *otherTx) error { return nil }
func (a otherAdapter) Handle() any                        { return a.s }

// commitErrTx fails its COMMIT with err.
type commitErrTx struct {
	storeTx
	err error
}

func (t *commitErrTx) Commit(context.Context, time.Duration) error { return t.err }

type commitErrAdapter struct {
	err   error
	calls *int
}

func (a commitErrAdapter) Begin(context.Context, txretry.TxOptions) (*commitErrTx, error) {
	return &commitErrTx{err: a.err}, nil
}
func (a commitErrAdapter) Call(context.Context, *commitErrTx) error { *a.calls++; return nil }

// A COMMIT error that an adapter marks with NotCommitted is an attempt's
// error like any other; an unmarked one that the engine cannot judge is
// uncertain.
func TestNotCommittedMarksAProvenRollback(t *testing.T) {
	lost := errors.New("connection reset")
	for _, tc := range []struct {
		name      string
		err       error
		uncertain bool
		calls     int
	}{
		{"unmarked", lost, true, 1},
		{"marked", txretry.NotCommitted(lost), false, 1},
		{"marked retryable", txretry.NotCommitted(conflict{}), false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := txretry.Run(context.Background(), commitErrAdapter{err: tc.err, calls: &calls},
				txretry.WithMaxAttempts(3), txretry.WithBackoff(txretry.Constant(0)))
			if errors.Is(err, txretry.ErrCommitUncertain) != tc.uncertain || calls != tc.calls {
				t.Fatalf("err = %v after %d calls; want uncertain=%v after %d", err, calls, tc.uncertain, tc.calls)
			}
			if !tc.uncertain && !errors.Is(err, txretry.ErrNotCommitted) {
				t.Fatalf("err = %v, want it to match ErrNotCommitted", err)
			}
		})
	}
	if txretry.NotCommitted(nil) != nil {
		t.Fatal("NotCommitted(nil) != nil")
	}
	if got := txretry.NotCommitted(lost).Error(); got != lost.Error() {
		t.Fatalf("NotCommitted changes the message to %q", got)
	}
}

func TestManagerForIsPerHandle(t *testing.T) {
	a, b := new(store), new(store)
	if ma := txretry.ManagerFor(a); ma == nil || ma != txretry.ManagerFor(a) || ma == txretry.ManagerFor(b) {
		t.Fatal("want one manager per handle")
	}
	for _, h := range []any{nil, (*store)(nil), store{}, new(struct{})} {
		if txretry.ManagerFor(h) != nil {
			t.Errorf("ManagerFor(%#v) is not nil", h)
		}
	}
}
