package txretry

import "time"

// SetStall sets how long m's closed gates may admit nobody before they widen
// by one (default 200 ms). Tests that hold a gate on purpose, and count its
// queue, set it long: under a loaded -race run the test's own goroutine can
// be late by the default, and the guard then admits the queue it counts.
func SetStall(m *ContentionManager, d time.Duration) { m.stall = d }

// GateWidth returns the width of the gate of m's domain label (0: open).
func GateWidth(m *ContentionManager, label string) int {
	v, ok := m.domains.Load(domainKey(label, nil))
	if !ok {
		return 0
	}
	d := v.(*cmDomain)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.width
}
