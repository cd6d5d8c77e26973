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
	// cmLockWait: an attempt that lasted at least this long and ended in a
	// deadlock (40P01) or in its caller's deadline was held in a lock wait
	// that a lock timeout would have ended, typically a deadlock that
	// PostgreSQL finds only after deadlock_timeout (1 s by default).
	cmLockWait = 250 * time.Millisecond
	// cmLockMemory: the lock timeout stays armed this long after the last
	// such attempt, or the last lock timeout it set off.
	cmLockMemory = time.Minute
)

// noteAttempt arms the default lock timeout after an attempt that shows
// lock waits worth ending: one held for cmLockWait and then ended by a
// deadlock or by its caller's context (cut is true), or one that the armed
// timeout ended.
func (m *ContentionManager) noteAttempt(err error, cut bool, d time.Duration, lockTimedOut bool, now time.Time) {
	if lockTimedOut || d >= cmLockWait && (cut || pgerr.IsDeadlock(err)) {
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
