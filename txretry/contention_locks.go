package txretry

// Lock waits that end calls: when a handle's calls run into lock waits
// that PostgreSQL would end only after deadlock_timeout, its manager arms
// WithLockTimeout for the calls that did not choose. See contention.md,
// "Deadlocks on PostgreSQL".

import (
	"time"

	"github.com/txretry/txretry/pgerr"
)

const (
	// cmLockWait: an attempt that lasted at least this long and was then
	// lost (40001, 40P01, or its caller's context ended) would have lost
	// no more to the default lock timeout, and likely waited for a lock
	// (a row its rival had changed, or a deadlock that PostgreSQL finds
	// only after deadlock_timeout, 1 s by default). Arming only after a
	// deadlock had ended (at 250 ms) left each new process to wait out its
	// first deadlocks: 1.6% and 4.1% of the calls failed in ten-account
	// transfers at 4 x 8 and 8 x 4, against 0.0% and 0.1% (contention.md).
	cmLockWait = DefaultLockTimeout
	// cmLockMemory: the lock timeout stays armed this long after the last
	// such attempt, or the last lock timeout it set off.
	cmLockMemory = time.Minute
)

// noteAttempt arms the default lock timeout after an attempt that shows
// lock waits worth ending: one that lasted cmLockWait and then failed
// with a serialization failure or a deadlock, or was ended by its
// caller's context (cut is true), or one that the armed timeout ended.
func (m *ContentionManager) noteAttempt(err error, cut bool, d time.Duration, lockTimedOut bool, now time.Time) {
	lost := cut || pgerr.IsRetryable(err)
	if lockTimedOut || d >= cmLockWait && lost {
		m.lockWaitAt.Store(now.UnixNano())
	}
}

// lockTimeoutArmed reports whether an attempt beginning now gets the
// default lock timeout: the manager saw lock waits worth ending within
// cmLockMemory.
func (m *ContentionManager) lockTimeoutArmed(now time.Time) bool {
	at := m.lockWaitAt.Load()
	return at != 0 && now.Sub(time.Unix(0, at)) < cmLockMemory
}
