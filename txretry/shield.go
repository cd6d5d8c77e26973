package txretry

import (
	"context"
	"sync"
	"time"
)

// beginWatchDelay is how long BEGIN (with the wait for a pooled connection)
// runs before the shield starts to follow the caller's context, so a caller
// that gives up during BEGIN is heard at most this late. Most BEGINs end
// sooner and then cost no registration on the caller's context
// (context.AfterFunc allocates twice), only the shield's pooled timer.
const beginWatchDelay = 2 * time.Millisecond

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

	// During BEGIN, watchTimer calls follow after beginWatchDelay. A late
	// call from an earlier use of the shield finds watching false, or
	// follows the current caller early, which is harmless.
	watchTimer *time.Timer
	mu         sync.Mutex // guards the fields below against follow
	watching   bool
	caller     context.Context
	unfollow   func() bool // from context.AfterFunc(caller, cancel), once follow ran
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

// watch makes the shield end with ctx, from beginWatchDelay on, until
// endWatch.
func (s *shield) watch(ctx context.Context) {
	s.mu.Lock()
	s.watching, s.caller = true, ctx
	s.mu.Unlock()
	if s.watchTimer == nil {
		s.watchTimer = time.AfterFunc(beginWatchDelay, s.follow)
	} else {
		s.watchTimer.Reset(beginWatchDelay)
	}
}

// follow runs on the watch timer's goroutine.
func (s *shield) follow() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watching && s.unfollow == nil {
		s.unfollow = context.AfterFunc(s.caller, s.cancel)
	}
}

// endWatch stops watching. If the caller's end already cancelled the
// shield, the shield is spoiled.
func (s *shield) endWatch() {
	s.watchTimer.Stop()
	s.mu.Lock()
	unfollow := s.unfollow
	s.watching, s.caller, s.unfollow = false, nil, nil
	s.mu.Unlock()
	if unfollow != nil && !unfollow() {
		s.spoiled = true
	}
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
