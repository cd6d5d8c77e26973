package txretry

import "time"

// The controller's tuning; contention.md gives the reason for each.
const (
	cmWindow  = 16      // ends in a window, plus two per unit of width
	cmGain    = 1.0 / 8 // a probe's goodput must beat its base's by this share
	cmRare    = 4       // a gate opens after a window where nobody queued and at most 1 in cmRare conflicted
	cmMaxHold = 15      // windows at the base between probes, at most
)

// cmControl finds a closed gate's width by its goodput (commits per
// second), under the domain's mutex. It measures in windows: the ends of
// cmWindow+2·width attempts admitted at the window's width, timed from the
// first end to the last. It keeps a base width with the goodput measured
// there, and probes a width beside it: a probe that beats the base by
// cmGain becomes the base and the next probe goes further the same way,
// twice as far; one that does not sends the gate back to the base, and the
// next probe goes the other way, half as far (as far as it can after the
// longest hold), after 1, 3, 7, then 15 windows at the base. A narrower width is a probe only from a base where
// callers queued: wider than the callers, a gate changes nothing.
type cmControl struct {
	gen                   uint64 // attempts admitted after this many ran at the current width
	n, commits, conflicts int    // the window's ends, commits after the first end, conflicts
	first, last           time.Time
	waited                bool // a caller queued during the window
	base                  int
	baseG                 float64 // goodput at base
	probing               bool    // the width is a probe, not the base
	fresh                 bool    // the first window since the gate closed: the first probe is at width 1
	dir, step             int     // the next probe's way (+1, -1) and distance
	hold, holds           int     // windows left at the base before a probe; the last hold
}

// learnLocked counts the end of an attempt admitted as number admit (0:
// straight in, the gate open). A conflict closes an open gate at the most
// attempts that were in at once, which queues nobody yet.
func (d *cmDomain) learnLocked(conflict bool, admit uint64, now time.Time, maxWidth int) {
	c := &d.ctl
	if d.width == 0 {
		if conflict && maxWidth > 1 {
			*c = cmControl{dir: -1, step: maxWidth, fresh: true}
			d.setWidthLocked(min(max(d.peak, 1), maxWidth-1), true, maxWidth)
		}
		return
	}
	if admit <= c.gen {
		return // it ran at another width
	}
	if c.n == 0 {
		c.first = now
	} else if !conflict {
		c.commits++
	}
	if conflict {
		c.conflicts++
	}
	c.n++
	c.last = now
	if c.n < cmWindow+2*d.width {
		return
	}
	g := 0.0
	if span := c.last.Sub(c.first); span > 0 {
		g = float64(c.commits) / span.Seconds()
	}
	w, queued, rare, fresh := d.width, c.waited, c.conflicts*cmRare <= c.n, c.fresh
	c.fresh = false
	switch {
	case !queued && rare: // it does nothing that pays
		d.setWidthLocked(0, true, maxWidth)
		return
	case c.probing && g > c.baseG*(1+cmGain): // the probe is the new base
		c.base, c.baseG, c.holds, c.step = w, g, 0, min(2*c.step, maxWidth)
	case c.probing: // back to the base; after the longest hold, probe far again
		c.dir, c.step = -c.dir, max(1, c.step/2)
		if c.holds == cmMaxHold {
			c.step = maxWidth
		}
		c.holds = min(2*c.holds+1, cmMaxHold)
		c.hold = c.holds
		d.setWidthLocked(c.base, true, maxWidth)
		return
	default:
		c.baseG = g
		if c.hold > 0 {
			c.hold--
			c.resetLocked(d)
			return
		}
	}
	next := 0
	if fresh && !rare && w > 1 {
		next = 1 // alone, an attempt can tell another process's conflicts
	}
	for i := 0; i < 2 && next == 0; i++ {
		switch {
		case c.dir < 0 && w > 1 && !rare:
			next = w - min(c.step, w/2)
		case c.dir > 0 && queued && !d.foreign:
			next = w + min(c.step, w)
		default:
			c.dir = -c.dir
		}
	}
	if next == 0 { // nothing to try here
		c.resetLocked(d)
		return
	}
	d.setWidthLocked(next, false, maxWidth)
}

// setWidthLocked sets the gate's width (maxWidth or more: the gate opens)
// as the base or as a probe, and starts a window there.
func (d *cmDomain) setWidthLocked(w int, base bool, maxWidth int) {
	c := &d.ctl
	if w >= maxWidth {
		w = 0
	}
	if d.width = w; w == 0 {
		d.peak, d.foreign = d.inUse, false
		d.lease.want(false)
	}
	if c.probing = !base; base {
		c.base = w
	}
	c.gen = d.admits
	c.resetLocked(d)
}

// resetLocked starts a window at the current width.
func (c *cmControl) resetLocked(d *cmDomain) {
	c.n, c.commits, c.conflicts = 0, 0, 0
	c.waited = len(d.queue) > 0
}
