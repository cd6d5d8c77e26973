package txretry_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// WithConflictDomain names the domain apart from the label: while a call
// holds the closed gate of "hot", a call labelled "hot" in domain "cold"
// runs at once, and a call labelled "other" in domain "hot" queues. An
// empty name is refused.
func TestWithConflictDomain(t *testing.T) {
	m := closedManager(t, "hot")
	f := newFixture(t, &fakedb.Driver{})
	release := make(chan struct{})
	_, holderDone := gateHolder(t, f.db, m, release)
	defer func() { close(release); <-holderDone }()
	noop := func(context.Context, *sql.Tx) error { return nil }

	// Bounds the wait, were the call to queue behind the holder.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := txretry.RunInTx(ctx, f.db, noop, txretry.WithContentionManager(m), txretry.WithLabel("hot"),
		txretry.WithConflictDomain("cold")); err != nil {
		t.Fatalf("labelled hot, in domain cold: %v, want it run at once", err)
	}

	qctx, qcancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- txretry.RunInTx(qctx, f.db, noop, txretry.WithContentionManager(m), txretry.WithLabel("other"),
			txretry.WithConflictDomain("hot"))
	}()
	waitQueued(t, m, 1)
	qcancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("labelled other, in domain hot: %v, want it queued until cancelled", err)
	}

	if err := txretry.RunInTx(ctx, f.db, noop, txretry.WithConflictDomain("")); !errors.Is(err, txretry.ErrInvalidOption) {
		t.Fatalf("an empty domain: %v, want ErrInvalidOption", err)
	}
}
