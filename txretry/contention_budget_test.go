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

// A retry admitted by the contention manager so late that an attempt as
// short as the first would end after the time budget is not started: the
// call ends exhausted by the budget, its place passed on. Real clock: the
// wait for admission runs on it.
func TestContentionAdmissionIsCheckedAgainstTheTimeBudget(t *testing.T) {
	m := newManager(t, 2) // a gate closes at width 1 (below 2, where it opens)
	f := newFixture(t, &fakedb.Driver{})
	const budget = 300 * time.Millisecond
	start := time.Now()

	// The call under test goes straight into the open domain "k" for a
	// first attempt of 100 ms, which conflicts. Meanwhile other calls
	// close the gate, and one of them holds its only place until 290 ms,
	// so the retry is admitted at about 290 ms.
	firstRunning, closed := make(chan struct{}), make(chan struct{})
	attempts := 0
	errc := make(chan error, 1)
	go func() {
		errc <- txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, _ *sql.Tx) error {
			attempts++
			if txretry.Attempt(ctx) == 1 {
				close(firstRunning)
				<-closed
				time.Sleep(time.Until(start.Add(100 * time.Millisecond)))
				return &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
			}
			return nil
		}, txretry.WithContentionManager(m), txretry.WithLabel("k"), txretry.WithTimeBudget(budget))
	}()
	<-firstRunning
	closeGate(t, m, "k")
	holder := make(chan error, 1)
	entered := make(chan struct{})
	go func() {
		holder <- txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error {
			close(entered)
			time.Sleep(time.Until(start.Add(290 * time.Millisecond)))
			return nil
		}, txretry.WithContentionManager(m), txretry.WithLabel("k"))
	}()
	<-entered
	close(closed)

	err := <-errc
	if herr := <-holder; herr != nil {
		t.Fatal(herr)
	}
	var re *txretry.RetryError
	if !errors.Is(err, txretry.ErrRetriesExhausted) || !errors.As(err, &re) || re.Reason != "time budget" || re.Attempts != 1 {
		t.Fatalf("err = %v, want exhaustion by the time budget after 1 attempt", err)
	}
	if attempts != 1 {
		t.Fatalf("fn ran %d times, want 1: the retry started after admission although it could not end within the budget", attempts)
	}
	// The place was given back: the gate admits the next call at once.
	if err := txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { return nil },
		txretry.WithContentionManager(m), txretry.WithLabel("k"), txretry.WithTimeBudget(time.Second)); err != nil {
		t.Fatalf("a call after the exhausted one: %v", err)
	}
	if n := m.Queued(); n != 0 {
		t.Fatalf("%d callers still queued", n)
	}
}
