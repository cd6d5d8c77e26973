package txretry

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// RetryBudget limits retries across calls, as gRPC and Finagle do against
// retry storms: every first attempt deposits Ratio tokens, every second
// deposits PerSecond tokens, and every retry withdraws one. When fewer than
// one token is left, a call that would retry returns its retryable error at
// once, as a *RetryError matching ErrRetriesExhausted with Reason "retry
// budget". A new budget holds one second's worth (PerSecond tokens) and its
// balance never exceeds max(10*PerSecond, 10), so a calm period saves up
// little: over T seconds with C calls from a new budget, retries number at
// most Ratio*C + PerSecond*(T+1), so attempts at most (1+Ratio)*C +
// PerSecond*(T+1); after a calm period, add at most the cap.
//
// A RetryBudget is safe for concurrent use; share one among the calls to
// one database or service. Make one with NewRetryBudget; the zero value
// allows no retry. Default: no budget.
type RetryBudget struct {
	ratio, perSecond, capacity float64
	clock                      Clock

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// NewRetryBudget returns a budget that allows retries up to ratio times the
// first attempts plus perSecond a second. clk is the clock that refills it
// (nil: the system clock). A negative or non-finite ratio or perSecond, or
// both zero, or a typed nil clk, returns an error matching ErrInvalidOption.
func NewRetryBudget(ratio, perSecond float64, clk Clock) (*RetryBudget, error) {
	bad := func(f float64) bool { return f < 0 || math.IsNaN(f) || math.IsInf(f, 0) }
	if bad(ratio) || bad(perSecond) || (ratio == 0 && perSecond == 0) {
		return nil, fmt.Errorf("%w: NewRetryBudget(%v, %v): ratio and perSecond must be finite, non-negative and not both zero",
			ErrInvalidOption, ratio, perSecond)
	}
	if clk == nil {
		clk = systemClock{}
	} else if isNil(clk) {
		return nil, fmt.Errorf("%w: NewRetryBudget: a typed nil Clock (%T); pass nil for the system clock", ErrInvalidOption, clk)
	}
	perSecond = min(perSecond, 1e9)
	return &RetryBudget{ratio: ratio, perSecond: perSecond, capacity: max(10*perSecond, 10), tokens: perSecond, clock: clk, last: clk.Now()}, nil
}

// refillLocked adds the tokens earned since the last refill.
func (b *RetryBudget) refillLocked() {
	if b.clock == nil { // the zero value
		b.clock = systemClock{}
	}
	now := b.clock.Now()
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(b.capacity, b.tokens+d.Seconds()*b.perSecond)
		b.last = now
	}
}

// deposit records a first attempt.
func (b *RetryBudget) deposit() {
	b.mu.Lock()
	b.refillLocked()
	b.tokens = min(b.capacity, b.tokens+b.ratio)
	b.mu.Unlock()
}

// withdraw takes a token for a retry, if there is one.
func (b *RetryBudget) withdraw() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Tokens returns the current balance, for observation and tests.
func (b *RetryBudget) Tokens() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked()
	return b.tokens
}

// WithRetryBudget makes the call's retries draw on b. Default: no budget.
func WithRetryBudget(b *RetryBudget) Option {
	return func(c *config) {
		if b == nil {
			c.fail("WithRetryBudget(nil)")
			return
		}
		c.budgetShared = b
	}
}
