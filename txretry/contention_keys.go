package txretry

// Key locks (WithContentionKeys): turns per key instead of a domain's gate.

import (
	"context"
	"slices"
	"time"
)

// cmKeys is a call's standing with its manager's keys.
type cmKeys struct {
	m    *ContentionManager
	keys []string // sorted, without duplicates
	held bool
}

// enter takes the keys one at a time in their sorted order, waiting in
// each key's FIFO queue, or gives them all back when ctx ends. Since every
// caller takes its keys in the same order, no two callers wait for each
// other in a cycle.
func (k *cmKeys) enter(ctx context.Context, limit time.Duration) (waited bool, err error) {
	m := k.m
	cancel := func() {}
	defer func() { cancel() }()
	for i, key := range k.keys {
		m.mu.Lock()
		if m.keys == nil {
			m.keys = make(map[string][]*cmWaiter)
		}
		ws, held := m.keys[key]
		if !held {
			m.keys[key] = nil
			m.mu.Unlock()
			continue
		}
		w := &cmWaiter{ready: make(chan struct{})}
		m.keys[key] = append(ws, w)
		m.mu.Unlock()
		waited = true
		if limit >= 0 { // bound the waits once, at the first
			ctx, cancel = bounded(ctx, limit)
			limit = -1
		}
		select {
		case <-w.ready:
		case <-ctx.Done():
			m.mu.Lock()
			if w.granted {
				m.unlockKeyLocked(key)
			} else {
				m.keys[key] = slices.DeleteFunc(m.keys[key], func(x *cmWaiter) bool { return x == w })
			}
			for _, h := range k.keys[:i] {
				m.unlockKeyLocked(h)
			}
			m.mu.Unlock()
			return true, context.Cause(ctx)
		}
	}
	k.held = true
	return waited, nil
}

// done gives the keys back: a conflict despite them came from elsewhere,
// and the backoff spaces the next attempt.
func (k *cmKeys) done(bool, time.Time) (time.Duration, bool) {
	k.cancel()
	return 0, false
}

func (k *cmKeys) cancel() {
	if !k.held {
		return
	}
	k.held = false
	k.m.mu.Lock()
	for _, key := range k.keys {
		k.m.unlockKeyLocked(key)
	}
	k.m.mu.Unlock()
}

// unlockKeyLocked gives a key to its first waiter, if any.
func (m *ContentionManager) unlockKeyLocked(key string) {
	ws := m.keys[key]
	if len(ws) == 0 {
		delete(m.keys, key)
		return
	}
	w := ws[0]
	m.keys[key] = ws[1:]
	w.granted = true
	close(w.ready)
}
