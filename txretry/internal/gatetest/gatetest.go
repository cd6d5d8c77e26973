// Package gatetest closes a contention domain's gate for the adapters'
// tests, through a scripted driver and a fake clock.
package gatetest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakeclock"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// Close makes the domain label of db's default manager conflict, alone, in
// a call of a 1.9 s time budget on a clock that does not move: the
// eleventh conflict doubles the domain's spacing to its 1 s cap, more than
// half the call's time, so its gate closes at width 1 (the real BEGINs fit
// in the budget on a real database too).
func Close(t testing.TB, db *sql.DB, label string) {
	t.Helper()
	n := 0
	err := txretry.RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error {
		if n++; n <= 11 {
			return &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
		}
		return nil
	}, txretry.WithLabel(label), txretry.WithClock(&fakeclock.Clock{}), txretry.WithTimeBudget(1900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
}
