package breaker

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/txretry/txretry/txretry"
)

func TestBlamesDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"business error", errors.New("insufficient funds"), false},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"caller's deadline", ctx.Err(), false},
		{"caller's deadline, wrapped", fmt.Errorf("transfer: %w", context.DeadlineExceeded), false},
		{"caller's cancellation", context.Canceled, false},
		{"retries exhausted", fmt.Errorf("x: %w", txretry.ErrRetriesExhausted), true},
		{"commit uncertain", fmt.Errorf("x: %w", txretry.ErrCommitUncertain), true},
		{"bad connection", driver.ErrBadConn, true},
		{"network error", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{"connection failure 08006", &pgconn.PgError{Code: "08006"}, true},
		{"admin shutdown 57P01", &pgconn.PgError{Code: "57P01"}, true},
		{"too many connections 53300", &pgconn.PgError{Code: "53300"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BlamesDatabase(tc.err); got != tc.want {
				t.Fatalf("BlamesDatabase(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// The circuit opens after Threshold bad calls in a row, answers ErrOpen
// without running fn while open, lets one trial through after the
// cooldown, and closes on a success.
func TestBreakerOpensAndCloses(t *testing.T) {
	now := time.Unix(0, 0)
	b := &Breaker{Threshold: 3, Cooldown: time.Second, Now: func() time.Time { return now }}
	b.record(true)
	b.record(false) // a success in between resets the count
	b.record(true)
	b.record(true)
	if b.Open() {
		t.Fatal("open after two bad calls in a row, want closed until three")
	}
	b.record(true)
	if !b.Open() {
		t.Fatal("closed after three bad calls in a row")
	}
	ran := false
	fn := func(context.Context, *sql.Tx) error { ran = true; return nil }
	// While open the database is not touched: a nil handle proves it.
	if err := b.RunInTx(context.Background(), nil, fn); !errors.Is(err, ErrOpen) || ran {
		t.Fatalf("RunInTx while open = %v (fn ran: %v), want ErrOpen without running fn", err, ran)
	}
	now = now.Add(time.Second)
	if !b.allow() {
		t.Fatal("no trial call after the cooldown")
	}
	if b.allow() {
		t.Fatal("a second call let through during the trial")
	}
	b.record(false)
	if b.Open() || !b.allow() {
		t.Fatal("a successful trial did not close the circuit")
	}
}

func TestZeroBreakerNeverOpens(t *testing.T) {
	var b Breaker
	for range 10 {
		b.record(true)
	}
	if b.Open() || !b.allow() {
		t.Fatal("a zero Breaker opened")
	}
}
