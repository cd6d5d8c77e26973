package txretry

import "time"

// Clock is the source of time for backoff waits and time-budget accounting.
// The default is the system clock. Statement, attempt and commit timeouts
// are context deadlines and always use the system clock, and so does the
// contention manager's watch for a gate that stands still.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is a stoppable one-shot timer, as returned by Clock.NewTimer.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }
