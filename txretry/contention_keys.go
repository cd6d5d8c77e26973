package txretry

// Key locks (WithContentionKeys): turns per key instead of the gate.

import (
	"context"
	"slices"
)

// tryLockKeys takes every key at once if none is held.
func (m *ContentionManager) tryLockKeys(keys []string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		if _, held := m.keys[k]; held {
			return false
		}
	}
	if m.keys == nil {
		m.keys = make(map[string][]*cmWaiter)
	}
	for _, k := range keys {
		m.keys[k] = nil
	}
	return true
}

// lockKeys takes the keys one at a time in their sorted order, waiting in
// each key's FIFO queue, or gives them all back when ctx ends. Since every
// caller takes its keys in the same order, no two callers wait for each
// other in a cycle.
func (m *ContentionManager) lockKeys(ctx context.Context, keys []string) error {
	for i, k := range keys {
		m.mu.Lock()
		if m.keys == nil {
			m.keys = make(map[string][]*cmWaiter)
		}
		ws, held := m.keys[k]
		if !held {
			m.keys[k] = nil
			m.mu.Unlock()
			continue
		}
		w := &cmWaiter{ready: make(chan struct{})}
		m.keys[k] = append(ws, w)
		m.mu.Unlock()
		select {
		case <-w.ready:
		case <-ctx.Done():
			m.mu.Lock()
			if w.granted {
				m.unlockKeyLocked(k)
			} else {
				m.keys[k] = slices.DeleteFunc(m.keys[k], func(x *cmWaiter) bool { return x == w })
			}
			for _, h := range keys[:i] {
				m.unlockKeyLocked(h)
			}
			m.mu.Unlock()
			return context.Cause(ctx)
		}
	}
	return nil
}

// unlockKeys gives the keys back, each to its first waiter if any.
func (m *ContentionManager) unlockKeys(keys []string) {
	m.mu.Lock()
	for _, k := range keys {
		m.unlockKeyLocked(k)
	}
	m.mu.Unlock()
}

func (m *ContentionManager) unlockKeyLocked(k string) {
	ws := m.keys[k]
	if len(ws) == 0 {
		delete(m.keys, k)
		return
	}
	w := ws[0]
	ws[0] = nil
	m.keys[k] = ws[1:]
	w.granted = true
	close(w.ready)
}
