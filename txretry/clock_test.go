package txretry_test

import (
	"sync"
	"time"

	"github.com/txretry/txretry/txretry"
)

// fakeClock advances by each wait at once (or never fires, when blocking),
// so that unit tests of the policy never sleep.
type fakeClock struct {
	mu       sync.Mutex
	now      time.Time
	waits    []time.Duration
	block    bool
	onWait   func(d time.Duration)
	timerOut chan struct{} // closed when a blocking timer is created
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Now(), timerOut: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) NewTimer(d time.Duration) txretry.Timer {
	if c.onWait != nil {
		c.onWait(d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, d)
	ch := make(chan time.Time, 1)
	if c.block {
		select {
		case <-c.timerOut:
		default:
			close(c.timerOut)
		}
		return fakeTimer{ch}
	}
	c.now = c.now.Add(d)
	ch <- c.now
	return fakeTimer{ch}
}

func (c *fakeClock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

type fakeTimer struct{ ch chan time.Time }

func (t fakeTimer) C() <-chan time.Time { return t.ch }
func (t fakeTimer) Stop() bool          { return true }
