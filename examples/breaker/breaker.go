package breaker

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
)

// ErrOpen is returned without touching the database while the circuit is open.
var ErrOpen = errors.New("circuit open: database unavailable")

// Breaker opens after Threshold consecutive calls failed in a way that
// blames the database, and lets one trial call through every Cooldown while
// open. Its zero value never opens; set Threshold and Cooldown.
type Breaker struct {
	Threshold int
	Cooldown  time.Duration
	Now       func() time.Time // nil: time.Now

	mu        sync.Mutex
	failures  int
	openUntil time.Time
}

// RunInTx is txretry.RunInTx behind the breaker: the breaker sees a call
// once, after txretry's retries, never each attempt.
func (b *Breaker) RunInTx(ctx context.Context, db txretry.DB, fn func(context.Context, *sql.Tx) error, opts ...txretry.Option) error {
	if !b.allow() {
		return ErrOpen
	}
	err := txretry.RunInTx(ctx, db, fn, opts...)
	b.record(BlamesDatabase(err))
	return err
}

// BlamesDatabase reports whether err says the database is unwell (it cannot
// be reached, or it keeps aborting transactions), as opposed to a business
// error, a constraint violation or the caller's own cancellation or
// deadline, which say nothing about it.
func BlamesDatabase(err error) bool {
	code := pgerr.SQLState(err)
	var netErr net.Error
	switch {
	case err == nil:
		return false
	case errors.Is(err, txretry.ErrRetriesExhausted), errors.Is(err, txretry.ErrCommitUncertain):
		return true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller's own end; context.DeadlineExceeded is also a
		// net.Error (a timeout), so this case comes before that one.
		return false
	case errors.Is(err, driver.ErrBadConn), errors.As(err, &netErr):
		return true
	case strings.HasPrefix(code, "08"), code == "57P01", code == "53300": // connection, admin shutdown, too many connections
		return true
	}
	return false
}

// Open reports whether the circuit is open: calls fail with ErrOpen until
// the cooldown lets a trial call through.
func (b *Breaker) Open() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Threshold > 0 && b.failures >= b.Threshold && b.now().Before(b.openUntil)
}

func (b *Breaker) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

func (b *Breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Threshold <= 0 || b.failures < b.Threshold {
		return true // closed
	}
	if b.now().Before(b.openUntil) {
		return false // open
	}
	b.openUntil = b.now().Add(b.Cooldown) // half-open: this call is the trial
	return true
}

func (b *Breaker) record(bad bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !bad {
		b.failures = 0 // a success closes the circuit
		return
	}
	b.failures++
	if b.Threshold > 0 && b.failures >= b.Threshold {
		b.openUntil = b.now().Add(b.Cooldown)
	}
}
