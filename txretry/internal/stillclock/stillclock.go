// Package stillclock is a txretry.Clock for tests of observers: its time
// moves only when a timer is made; the timer fires at once and the clock
// jumps by its duration, so attempts take no time and the time waited is the
// sum of the delays.
package stillclock

import (
	"sync"
	"time"

	"github.com/txretry/txretry/txretry"
)

// Clock is a still clock; the zero value starts at the zero time.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer advances the clock by d and returns a timer that has fired.
func (c *Clock) NewTimer(d time.Duration) txretry.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return firedTimer(ch)
}

type firedTimer chan time.Time

func (t firedTimer) C() <-chan time.Time { return t }
func (t firedTimer) Stop() bool          { return false }
