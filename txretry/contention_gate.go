package txretry

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const (
	cmMinSpacing   = time.Millisecond       // an open domain's spacing doubles from here...
	cmMaxSpacing   = time.Second            // ...up to here
	cmSpacingDecay = 0.9                    // a commit keeps this much of the spacing
	cmSoloAttempt  = 3                      // a call's attempt from this one on runs alone in an open domain
	cmStall        = 2 * cmMaxPace          // a gate that admits nobody this long widens by one
	cmMinPace      = 500 * time.Microsecond // a pace doubles from here...
	cmMaxPace      = 100 * time.Millisecond // ...up to here
	cmPacePatience = 200 * time.Millisecond // a call this old no longer pauses
	cmPaceDecay    = 0.9                    // a lone commit keeps this much of the pace
	cmLeaseTurn    = 10 * time.Millisecond  // no new attempt starts under a lease this old
	cmLeaseWait    = 250 * time.Millisecond // longest wait for a lease
	cmLeaseRest    = time.Second            // how long a domain goes without, after no lease
	cmWindow       = 16                     // ends in a window, plus two per unit of width
	cmGain         = 1.0 / 8                // a probe's goodput must beat its base's by this share
	cmRare         = 4                      // a window where nobody queued and at most 1 in cmRare conflicted opens the gate
	cmMaxHold      = 15                     // windows at the base between probes, at most
)

// arrivals numbers calls at their first wait at a gate.
var arrivals atomic.Uint64

// cmDomain is one conflict domain of a manager, under its mutex.
type cmDomain struct {
	mu      sync.Mutex
	width   int           // attempts in at once; 0: the gate is open
	inUse   int           // attempts in, and callers pausing in their place
	peak    int           // the most attempts in at once while open
	queue   []*cmTurn     // waiting, by arrival
	spacing time.Duration // open: a retry waits half to all of it
	solo    bool          // open: an attempt runs alone, the others wait
	admits  uint64        // attempts admitted through the gate
	ctl     cmControl     // finds the width
	pace    time.Duration
	foreign bool // it met another process since the gate closed: width 1
	lease   cmLease
}

// admission is all the call's loop uses of its manager: enter waits within
// ctx and limit (real time; negative: none); done returns a pause to take
// in the call's place and whether the manager spaces the next attempt
// (else the backoff does); cancel gives back what the call holds.
type admission interface {
	enter(ctx context.Context, limit time.Duration) (waited bool, err error)
	done(conflict bool, now time.Time) (pause time.Duration, spaced bool)
	committing()
	cancel()
}

// cmTurn is a call's standing in its domain.
type cmTurn struct {
	m       *ContentionManager
	d       *cmDomain
	key     string       // d's name, for its lease
	lease   AdapterLease // nil: the adapter cannot lease
	since   time.Time    // the call's start, for the pace's patience
	rand    func() float64
	arrival uint64        // the call's order of arrival, from its first attempt
	ready   chan struct{} // closed when the gate admits it from the queue
	admit   uint64        // d.admits when this attempt entered; 0: straight in
	started uint64        // the manager's starts when it entered; 0: not running
	alone   bool          // no other gated attempt of the manager was in then
	held    bool          // the call holds a place (an attempt, or a pause)
	leased  bool          // the attempt runs under the lease
	tries   int           // attempts the call entered
	solo    bool          // this attempt runs alone in its open domain
	early   bool          // its place went to the next at COMMIT (overlap)
	end     time.Time     // the call's deadline or time budget, on its clock; zero: none
}

func (t *cmTurn) enter(ctx context.Context, limit time.Duration) (bool, error) {
	if limit >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	waited, err := t.admitted(ctx)
	if err == nil && t.admit != 0 && t.lease != nil {
		take := func(ctx context.Context) (func(), error) { return t.lease.Lease(ctx, "\x00domain\x00"+t.key) }
		if t.leased, waited, err = t.d.lease.join(ctx, take, waited); err != nil {
			t.cancel()
		}
	}
	return waited, err
}

// committing gives the place of a leased attempt that is sending COMMIT
// to the next caller, where the database queues that one behind it
// (AdapterOverlapCommit); other attempts go on at once.
func (t *cmTurn) committing() {
	if o, ok := t.lease.(AdapterOverlapCommit); !t.leased || !ok || !o.OverlapCommit() {
		return
	}
	d := t.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if t.held {
		d.inUse--
		t.held, t.early = false, true
		d.grantLocked()
	}
}

// admitted waits for a place in the gate, or goes straight in; a gate that
// stood still while t headed its queue widens by one.
func (t *cmTurn) admitted(ctx context.Context) (bool, error) {
	d := t.d
	d.mu.Lock()
	if t.join() {
		d.mu.Unlock()
		return false, nil
	}
	for mark := d.admits; ; mark = d.admits {
		d.mu.Unlock()
		select {
		case <-t.ready:
			return true, nil
		case <-ctx.Done():
			t.cancel()
			return true, context.Cause(ctx)
		case <-time.After(cmp.Or(t.m.stall, cmStall)):
		}
		d.mu.Lock()
		if t.solo && d.width == 0 && !d.solo && len(d.queue) > 0 && d.queue[0] == t {
			t.solo = false // the attempts in may wait for a caller outside
			d.grantLocked()
			continue
		}
		if d.admits == mark && d.width > 0 && len(d.queue) > 0 && d.queue[0] == t {
			d.setWidthLocked(d.width+1, true, t.m.maxWidth())
			d.grantLocked()
		}
	}
}

// join reports whether t is in at once, else queues it by arrival.
func (t *cmTurn) join() bool {
	d := t.d
	t.tries++
	if t.arrival == 0 {
		t.arrival = arrivals.Add(1)
	}
	switch {
	case t.held:
		d.inUse--
		d.enterLocked(t)
		return true
	case d.width == 0:
		// Open: in at once unless an attempt runs alone or waits to.
		t.solo = t.tries >= cmSoloAttempt
		if len(d.queue) == 0 && d.openFor(t) {
			d.enterOpenLocked(t)
			return true
		}
	case len(d.queue) == 0 && d.inUse < d.width:
		d.enterLocked(t)
		return true
	default:
		d.ctl.waited = true
	}
	t.ready = make(chan struct{})
	i := len(d.queue)
	for i > 0 && d.queue[i-1].arrival > t.arrival {
		i--
	}
	d.queue = slices.Insert(d.queue, i, t)
	return false
}

// openFor reports whether t's attempt may enter the open domain now: no
// attempt runs alone, and t's, if it is to run alone, finds nobody in.
func (d *cmDomain) openFor(t *cmTurn) bool {
	return !d.solo && (!t.solo || d.inUse == 0)
}

func (d *cmDomain) enterOpenLocked(t *cmTurn) {
	d.inUse++
	d.peak = max(d.peak, d.inUse)
	d.solo = t.solo
	t.admit, t.held = 0, true
}

func (d *cmDomain) enterLocked(t *cmTurn) {
	d.inUse++
	d.admits++
	t.admit, t.held = d.admits, true
	t.started = t.m.starts.Add(1)
	t.alone = t.m.running.Add(1) == 1
}

// stop reports whether no other gated attempt of the manager overlapped t's.
func (t *cmTurn) stop() (alone bool) {
	if t.started != 0 {
		t.m.running.Add(-1)
		alone, t.started = t.alone && t.m.starts.Load() == t.started, 0
	}
	return alone
}

func (d *cmDomain) grantLocked() {
	for d.width == 0 && len(d.queue) > 0 && d.openFor(d.queue[0]) {
		t := d.queue[0]
		d.queue = d.queue[1:]
		d.enterOpenLocked(t)
		close(t.ready)
	}
	for d.width > 0 && len(d.queue) > 0 && d.inUse < d.width {
		t := d.queue[0]
		d.queue = d.queue[1:]
		d.enterLocked(t)
		close(t.ready)
	}
}

func (t *cmTurn) done(conflict bool, now time.Time) (pause time.Duration, spaced bool) {
	d := t.d
	d.mu.Lock()
	defer t.unlock()
	if d.width == 0 {
		t.stop()
		if !t.early {
			d.inUse--
		}
		t.held, t.early = false, false
		if t.solo {
			d.solo, t.solo = false, false
		}
		pause, spaced = d.spaceLocked(t, conflict)
		d.grantLocked()
		return pause, spaced
	}
	t.solo = false
	if t.stop() { // a conflict came from another process
		pause = d.paceLocked(conflict, now, t.since, t.rand)
		if conflict && t.lease != nil {
			d.lease.want(true)
		}
		if conflict && !d.foreign {
			// Width 1 from now on: each process that widened would take
			// a larger share of the row, and under a lease a window's
			// goodput measures the turns the process got, not its width.
			d.foreign = true
			d.setWidthLocked(1, true, t.m.maxWidth())
		}
	}
	if pause == 0 && !t.early {
		d.inUse--
	}
	t.held = t.held && pause != 0 // after COMMIT, a pause queues by arrival
	t.early = false
	d.learnLocked(conflict, t.admit, now, t.m.maxWidth())
	d.grantLocked()
	return pause, d.width > 0 && t.admit != 0 // a retry of an attempt straight in waits the backoff
}

func (t *cmTurn) cancel() {
	d := t.d
	d.mu.Lock()
	defer t.unlock()
	t.stop()
	t.early = false
	if t.held {
		t.held = false
		d.inUse--
		if t.solo && d.width == 0 {
			d.solo = false
		}
	}
	t.solo = false
	d.queue = slices.DeleteFunc(d.queue, func(x *cmTurn) bool { return x == t })
	d.grantLocked()
}

// unlock unlocks t's domain, giving its lease back (outside the lock).
func (t *cmTurn) unlock() {
	d := t.d
	release := d.lease.leave(t.leased, d.width == 0 || d.inUse == 0 && len(d.queue) == 0)
	t.leased = false
	d.mu.Unlock()
	if release != nil {
		release()
	}
}

// spaceLocked learns from an attempt of an open domain: a commit shrinks
// the spacing, a conflict doubles it and returns the retry's pause (none
// for a retry that will run alone), or closes the gate where the spacing
// reached half the call's time.
func (d *cmDomain) spaceLocked(t *cmTurn, conflict bool) (pause time.Duration, spaced bool) {
	if !conflict {
		if d.spacing = time.Duration(float64(d.spacing) * cmSpacingDecay); d.spacing < cmMinSpacing {
			d.spacing = 0
		}
		return 0, false
	}
	d.spacing = min(max(2*d.spacing, cmMinSpacing), cmMaxSpacing)
	maxWidth := t.m.maxWidth()
	if !t.end.IsZero() && 2*d.spacing > t.end.Sub(t.since) && maxWidth > 1 {
		d.solo = false
		d.ctl = cmControl{dir: -1, step: maxWidth, fresh: true}
		d.setWidthLocked(min(max(d.peak, 1), maxWidth-1), true, maxWidth)
		return 0, true // the gate spaces it
	}
	if t.tries+1 >= cmSoloAttempt {
		return 1, true // at once, to wait its turn alone
	}
	return d.spacing/2 + time.Duration(t.rand()*float64(d.spacing/2)), false
}

// paceLocked learns from a lone attempt; a conflict returns a pause.
func (d *cmDomain) paceLocked(conflict bool, now, since time.Time, rnd func() float64) time.Duration {
	if !conflict {
		if d.pace = time.Duration(float64(d.pace) * cmPaceDecay); d.pace < cmMinPace {
			d.pace = 0
		}
		return 0
	}
	d.pace = min(max(2*d.pace, cmMinPace), cmMaxPace)
	p := float64(d.pace) * rnd() * max(0, 1-float64(now.Sub(since))/float64(cmPacePatience))
	return max(time.Duration(p), 1) // 1: at once, in its place
}

// cmLease is a domain's lease (AdapterLease), after the domain's mutex.
type cmLease struct {
	mu      sync.Mutex
	wanted  bool          // a conflict from another process since the gate closed
	taking  bool          // an attempt is taking it
	release func()        // gives the held lease back; nil: not held
	users   int           // attempts running under it
	at      time.Time     // when it was taken
	over    bool          // the turn is over: no new users
	rest    time.Time     // no lease before then
	change  chan struct{} // closed when it is taken, given back or not had
}

// want sets wanted; changed wakes the waiters and waits on c next.
func (l *cmLease) want(on bool) {
	l.mu.Lock()
	l.wanted = on
	l.mu.Unlock()
}

func (l *cmLease) changed(c chan struct{}) {
	if l.change != nil {
		close(l.change)
	}
	l.change = c
}

// join runs an admitted attempt under the lease if wanted and to be had.
func (l *cmLease) join(ctx context.Context, take func(context.Context) (func(), error), waited bool) (bool, bool, error) {
	for {
		l.mu.Lock()
		switch {
		case !l.wanted || time.Now().Before(l.rest):
			l.mu.Unlock()
			return false, waited, nil
		case l.release != nil && !l.over:
			l.users++
			l.mu.Unlock()
			return true, waited, nil
		case l.release == nil && !l.taking:
			l.taking = true
			l.mu.Unlock()
			lctx, cancel := context.WithTimeout(ctx, cmLeaseWait)
			release, err := take(lctx)
			cancel()
			l.mu.Lock()
			defer l.mu.Unlock()
			l.taking = false
			l.changed(nil)
			switch {
			case err == nil:
				l.release, l.at, l.users, l.over = release, time.Now(), 1, false
				return true, true, nil
			case ctx.Err() != nil:
				return false, true, context.Cause(ctx)
			}
			l.rest = time.Now().Add(cmLeaseRest)
			return false, true, nil
		}
		if l.change == nil {
			l.change = make(chan struct{})
		}
		change := l.change
		l.mu.Unlock()
		waited = true
		select {
		case <-change:
		case <-ctx.Done():
			return false, true, context.Cause(ctx)
		}
	}
}

// leave ends an attempt's use (user) and returns the release once the turn
// is over (idle: the domain has nobody in or waiting) and nobody uses it.
func (l *cmLease) leave(user, idle bool) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if user {
		l.users--
	}
	if l.over = l.over || idle || l.release != nil && time.Since(l.at) >= cmLeaseTurn; l.release == nil || !l.over || l.users > 0 {
		return nil
	}
	release := l.release
	l.release, l.over = nil, false
	l.changed(nil)
	return release
}

// cmControl finds a closed gate's width by its goodput (see contention.md),
// under the domain's mutex.
type cmControl struct {
	gen                   uint64 // attempts admitted after this many ran at the current width
	n, commits, conflicts int    // the window's ends, commits after its first end, conflicts
	first, last           time.Time
	waited                bool // a caller queued during the window
	fresh                 bool // the first window since the gate closed: the first probe is at 1
	probing               bool // the width is a probe, not the base
	base, dir, step       int  // the next probe's way (+1, -1) and distance
	hold, holds           int  // windows left at the base before a probe; the last hold
	baseG                 float64
}

// learnLocked counts the end of an attempt admitted as number admit.
func (d *cmDomain) learnLocked(conflict bool, admit uint64, now time.Time, maxWidth int) {
	c := &d.ctl
	if d.width == 0 || admit <= c.gen {
		return // it ran at another width
	}
	if c.n++; c.n == 1 {
		c.first = now
	} else if !conflict {
		c.commits++
	}
	if conflict {
		c.conflicts++
	}
	if c.last = now; c.n < cmWindow+2*d.width {
		return
	}
	g := float64(c.commits) / max(c.last.Sub(c.first).Seconds(), 1e-9)
	w, queued, rare, fresh := d.width, c.waited, c.conflicts*cmRare <= c.n, c.fresh
	c.fresh = false
	switch {
	case !queued && rare: // the gate does nothing that pays
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
	case c.hold > 0:
		c.baseG, c.n, c.commits, c.conflicts, c.waited = g, 0, 0, 0, len(d.queue) > 0
		c.hold--
		return
	}
	c.baseG = g
	next := w // nothing to probe
	if fresh && c.conflicts*2 > c.n && w > 1 {
		next = 1 // a row more hot than not; alone, an attempt tells another process's conflicts
	}
	for i := 0; i < 2 && next == w; i++ {
		switch {
		case c.dir < 0 && w > 1 && !rare:
			next = w - min(c.step, w/2)
		case c.dir > 0 && queued && !d.foreign:
			next = w + min(c.step, w)
		default:
			c.dir = -c.dir
		}
	}
	d.setWidthLocked(next, next == w, maxWidth)
}

// setWidthLocked sets the width (maxWidth: open), base or probe, for a window.
func (d *cmDomain) setWidthLocked(w int, base bool, maxWidth int) {
	c := &d.ctl
	if w >= maxWidth {
		w = 0
	}
	if d.width = w; w == 0 {
		// Reopened, a conflict closes it again until commits shrink
		// the spacing.
		d.peak, d.foreign, d.spacing = d.inUse, false, cmMaxSpacing
		d.lease.want(false)
	}
	if c.probing = !base; base {
		c.base = w
	}
	c.gen, c.n, c.commits, c.conflicts, c.waited = d.admits, 0, 0, 0, len(d.queue) > 0
}
