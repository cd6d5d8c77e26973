package txretry

import (
	"context"
	"sync"
	"time"
)

// A shield is the context a database/sql transaction is begun on: it
// carries the caller's values but not the caller's cancellation, and the
// adapter cancels it itself, to abandon BEGIN when the caller gives up and to
// bound COMMIT and ROLLBACK (database/sql rolls a transaction back when its
// BeginTx context ends, and drivers such as pgx's stdlib commit under it).
//
// Shields are pooled. One that was never cancelled goes back to the pool
// with its Done channel, its children map (database/sql registers each
// transaction's own context there and removes it at COMMIT or ROLLBACK) and
// its timer, so that a call costs no allocation for them. One that was
// cancelled, or whose timer may still fire, is dropped.
type shield struct {
	values  valuesOnly
	ctx     context.Context // context.WithCancel(&values)
	cancel  context.CancelFunc
	timer   *time.Timer // cancels when a COMMIT or ROLLBACK outlives its timeout
	armed   bool
	spoiled bool // cancelled, or about to be by a callback already started
}

var shields = sync.Pool{New: func() any {
	s := new(shield)
	s.ctx, s.cancel = context.WithCancel(&s.values)
	return s
}}

func getShield(ctx context.Context) *shield {
	s := shields.Get().(*shield)
	s.values.parent = ctx
	return s
}

// arm starts the timer that cancels the shield after d.
func (s *shield) arm(d time.Duration) {
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.cancel)
	} else {
		s.timer.Reset(d)
	}
	s.armed = true
}

// release ends the shield's use by one transaction.
func (s *shield) release() {
	if s.armed && !s.timer.Stop() {
		s.spoiled = true // the timer fired or is firing
	}
	s.armed = false
	s.values.parent = nil
	if s.spoiled || s.ctx.Err() != nil {
		s.cancel()
		return
	}
	shields.Put(s)
}

// valuesOnly is a context with the values of parent and nothing else: no
// deadline, never done (like context.WithoutCancel, but reusable).
type valuesOnly struct{ parent context.Context }

func (*valuesOnly) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*valuesOnly) Done() <-chan struct{}       { return nil }
func (*valuesOnly) Err() error                  { return nil }
func (v *valuesOnly) String() string            { return "txretry.shield" }

func (v *valuesOnly) Value(key any) any {
	if v.parent == nil {
		return nil
	}
	return v.parent.Value(key)
}
