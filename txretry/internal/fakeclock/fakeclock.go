// Package fakeclock is the txretry.Clock of the tests: its time moves only
// when a timer is made (or the test calls Advance). A timer fires at once and
// the clock jumps by its duration, so attempts take no time, the time waited
// is the sum of the delays, and no test sleeps; with Block set, timers never
// fire, for tests of what ends a wait.
//
// The contention manager's internal tests keep a clock of their own
// (handClock): they are in package txretry, which this package imports.
package fakeclock

import (
	"sync"
	"time"

	"github.com/txretry/txretry/txretry"
)

// Clock is a fake clock. The zero value is ready: its time starts at the
// real time of its first use. Set Block and OnWait before the clock is used.
type Clock struct {
	// Block makes timers never fire (and time not move).
	Block bool
	// OnWait, if set, is called with each timer's duration as it is made.
	OnWait func(d time.Duration)

	mu       sync.Mutex
	now      time.Time
	waits    []time.Duration
	blocking chan struct{} // closed once a blocking timer was made
}

func (c *Clock) init() {
	if c.now.IsZero() {
		c.now = time.Now()
		c.blocking = make(chan struct{})
	}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	return c.now
}

// Advance moves the clock's time forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	c.now = c.now.Add(d)
}

// NewTimer records d and returns a timer that has fired, after moving the
// clock forward by d; with Block, a timer that never fires.
func (c *Clock) NewTimer(d time.Duration) txretry.Timer {
	if c.OnWait != nil {
		c.OnWait(d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	c.waits = append(c.waits, d)
	ch := make(chan time.Time, 1)
	if c.Block {
		select {
		case <-c.blocking:
		default:
			close(c.blocking)
		}
		return timer(ch)
	}
	c.now = c.now.Add(d)
	ch <- c.now
	return timer(ch)
}

// Waits returns the durations of the timers made so far.
func (c *Clock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

// Blocking returns a channel closed once a timer was made under Block.
func (c *Clock) Blocking() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.init()
	return c.blocking
}

type timer chan time.Time

func (t timer) C() <-chan time.Time { return t }
func (t timer) Stop() bool          { return true }
