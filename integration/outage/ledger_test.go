//go:build unix

package outage

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// ledger is what the server holds after a load, set against what the
// calls returned.
type ledger struct {
	ok, failed, uncertain int
	// uncertainApplied are the uncertain calls found applied.
	uncertainApplied int
	// missing returned nil but are not applied; duplicated are applied
	// more than once; failedApplied returned an error that is not
	// ErrCommitUncertain, yet are applied.
	missing, duplicated, failedApplied int
}

// checkLedger reads the ledger and the balances through db (a fresh pool
// on the server that survived) and fails t unless every call that
// returned nil is applied once, none is applied twice, none reported
// failed is applied, and the balances are what the ledger says.
func checkLedger(t *testing.T, db *sql.DB, rs []result) ledger {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	applied := map[int64]int{}
	want := map[int]int64{}
	rows, err := db.QueryContext(ctx, "SELECT call_id, from_id, to_id, amount FROM ledger")
	if err != nil {
		t.Fatalf("read ledger: %v", err)
	}
	for rows.Next() {
		var id int64
		var m transfer
		if err := rows.Scan(&id, &m.from, &m.to, &m.amount); err != nil {
			t.Fatalf("read ledger: %v", err)
		}
		applied[id]++
		want[m.from] -= m.amount
		want[m.to] += m.amount
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		t.Fatalf("read ledger: %v", err)
	}

	var l ledger
	seen := map[int64]bool{}
	for _, r := range rs {
		seen[r.id] = true
		n := applied[r.id]
		if n > 1 {
			l.duplicated++
		}
		switch {
		case r.err == nil:
			l.ok++
			if n == 0 {
				l.missing++
			}
		case errors.Is(r.err, txretry.ErrCommitUncertain):
			l.uncertain++
			if n > 0 {
				l.uncertainApplied++
			}
		default:
			l.failed++
			if n > 0 {
				l.failedApplied++
			}
		}
	}
	for id := range applied {
		if !seen[id] {
			t.Errorf("ledger holds call %d, which no worker made", id)
		}
	}
	if l.missing+l.duplicated+l.failedApplied > 0 {
		t.Errorf("ledger: %d calls that returned nil are missing, %d applied twice, %d reported failed are applied",
			l.missing, l.duplicated, l.failedApplied)
	}

	rows, err = db.QueryContext(ctx, "SELECT id, balance FROM accounts")
	if err != nil {
		t.Fatalf("read balances: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		var balance int64
		if err := rows.Scan(&id, &balance); err != nil {
			t.Fatalf("read balances: %v", err)
		}
		if balance != initial+want[id] {
			t.Errorf("account %d: balance %d, want %d from the ledger", id, balance, initial+want[id])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read balances: %v", err)
	}
	t.Logf("ledger: %d calls succeeded, %d failed, %d uncertain (%d of them applied); %d missing, %d duplicated, %d failed but applied",
		l.ok, l.failed, l.uncertain, l.uncertainApplied, l.missing, l.duplicated, l.failedApplied)
	return l
}
