// Package gatetest closes a contention domain's gate for the adapters'
// tests, through a scripted driver and a fake clock.
package gatetest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakeclock"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// Close makes the domain label of db's default manager conflict once,
// alone: its gate closes at width 1.
func Close(t testing.TB, db *sql.DB, label string) {
	t.Helper()
	n := 0
	err := txretry.RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error {
		if n++; n == 1 {
			return &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
		}
		return nil
	}, txretry.WithLabel(label), txretry.WithClock(&fakeclock.Clock{}))
	if err != nil {
		t.Fatal(err)
	}
}
