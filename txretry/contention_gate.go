package txretry

// A conflict domain's gate: when it closes, how it admits, how wide it is,
// and the pace and the lease after conflicts with other processes. See
// contention.md.

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The gate's tuning; contention.md gives the figure that chose each.
const (
	cmAlpha    = 1.0 / 64      // weight of one attempt in the moving average of conflicts
	cmMaxRate  = 1.0 / 4       // above this rate a conflict closes the gate or halves it
	cmStreak   = 16            // commits per unit of width that double the width...
	cmMaxFails = 6             // ...times 2^narrowings in a row, up to 2^cmMaxFails
	cmStall    = 2 * cmMaxPace // a gate that admits nobody this long widens by one

	cmMinPace      = 500 * time.Microsecond // a pace doubles from here...
	cmMaxPace      = 100 * time.Millisecond // ...up to here
	cmPacePatience = 200 * time.Millisecond // a call this old no longer pauses
	cmPaceDecay    = 0.9                    // a lone commit keeps this much of the pace

	cmLeaseTurn = 10 * time.Millisecond  // no new attempt starts under a lease this old
	cmLeaseWait = 250 * time.Millisecond // longest wait for a lease
	cmLeaseRest = time.Second            // how long a domain goes without, after no lease
)

// arrivals numbers calls at their first wait at a gate: a retry goes
// before every call that arrived after its own.
var arrivals atomic.Uint64

// cmDomain is one conflict domain of a manager, under its mutex.
type cmDomain struct {
	mu       sync.Mutex
	width    int       // attempts in at once; 0: the gate is open, they go straight in
	inUse    int       // attempts in, and callers pausing in their place
	rate     float64   // moving average of the attempts' conflicts (0 or 1 each)
	queue    []*cmTurn // waiting, by arrival
	streak   int       // commits since the width last changed or a conflict over cmMaxRate
	fails    int       // narrowings since the gate closed, up to cmMaxFails
	narrowed uint64    // admits when the gate last closed or narrowed
	admits   uint64    // attempts admitted through the gate
	pace     time.Duration
	lease    cmLease
}

// admission is a call's standing with its manager, in its domain. The
// call's loop uses only these three methods.
type admission interface {
	// enter waits until the call's next attempt may begin, or ctx ends,
	// or limit (real time; negative: none) passes; waited says whether
	// the call queued.
	enter(ctx context.Context, limit time.Duration) (waited bool, err error)
	// done leaves after an attempt. It returns a pause that the call
	// takes in its place before entering again (0: none), and whether
	// the manager spaces the next attempt (if not, the backoff does).
	done(conflict bool, now time.Time) (pause time.Duration, spaced bool)
	// cancel gives back what the call holds: an admission whose attempt
	// does not run, or its place during a pause. Afterwards it is a no-op.
	cancel()
}

// cmTurn is a call's standing in a domain: one call's, under the domain's
// mutex while it queues.
type cmTurn struct {
	d       *cmDomain
	key     string       // d's name, for its lease
	lease   AdapterLease // nil: the adapter cannot lease
	max     int          // the manager's maximum width
	since   time.Time    // the call's start, for the pace's patience
	rand    func() float64
	arrival uint64        // 0 until the call first waits
	ready   chan struct{} // closed when the gate admits it from the queue
	admit   uint64        // the domain's admits when this attempt entered; 0: it went straight in
	alone   bool          // no other attempt was in when this one entered
	held    bool          // the call holds a place (an attempt, or a pause)
	leased  bool          // the attempt runs under the domain's lease
}

func (t *cmTurn) enter(ctx context.Context, limit time.Duration) (bool, error) {
	if limit >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	waited, err := t.admitted(ctx)
	if err == nil && t.admit != 0 && t.lease != nil {
		var w bool
		if w, err = t.useLease(ctx); err != nil {
			t.cancel()
		}
		waited = waited || w
	}
	return waited, err
}

// admitted waits for a place in the gate, or goes straight in.
func (t *cmTurn) admitted(ctx context.Context) (bool, error) {
	d := t.d
	d.mu.Lock()
	if t.join() {
		d.mu.Unlock()
		return false, nil
	}
	mark := d.admits
	d.mu.Unlock()
	stall := time.NewTimer(cmStall)
	defer stall.Stop()
	for {
		select {
		case <-t.ready:
			return true, nil
		case <-ctx.Done():
			t.cancel()
			return true, context.Cause(ctx)
		case <-stall.C:
			d.mu.Lock()
			if d.admits == mark && d.width > 0 && len(d.queue) > 0 && d.queue[0] == t {
				d.width++ // stood still: the attempts inside may wait for the callers outside
				d.grantLocked()
			}
			mark = d.admits
			d.mu.Unlock()
			stall.Reset(cmStall)
		}
	}
}

// join reports whether t is in at once: it kept its place through a
// pause, or its domain is open (straight in), or its gate has room and
// nobody waits. Otherwise it queues t by its call's arrival (numbered at
// its first entry into a closed gate).
func (t *cmTurn) join() bool {
	d := t.d
	switch {
	case t.held: // kept its place through a pause
		d.inUse--
		d.enterLocked(t)
	case d.width == 0:
		d.inUse++
		t.admit, t.held = 0, true
	default:
		if t.arrival == 0 {
			t.arrival = arrivals.Add(1)
		}
		if len(d.queue) == 0 && d.inUse < d.width {
			d.enterLocked(t)
			return true
		}
		t.ready = make(chan struct{})
		i := len(d.queue)
		for i > 0 && d.queue[i-1].arrival > t.arrival {
			i--
		}
		d.queue = slices.Insert(d.queue, i, t)
		return false
	}
	return true
}

func (d *cmDomain) enterLocked(t *cmTurn) {
	t.alone = d.inUse == 0
	d.inUse++
	d.admits++
	t.admit, t.held = d.admits, true
}

func (d *cmDomain) grantLocked() {
	for len(d.queue) > 0 && (d.width == 0 || d.inUse < d.width) {
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
	if t.admit != 0 && t.alone && t.admit == d.admits {
		// No other attempt of this process overlapped: a conflict came
		// from elsewhere.
		pause = d.paceLocked(conflict, now, t.since, t.rand)
		d.lease.wanted = d.lease.wanted || conflict && t.lease != nil
	}
	if pause == 0 {
		d.inUse--
		t.held = false
	}
	d.learnLocked(conflict, t.admit, t.max)
	d.grantLocked()
	return pause, d.width > 0
}

func (t *cmTurn) cancel() {
	d := t.d
	d.mu.Lock()
	defer t.unlock()
	if t.held {
		t.held = false
		d.inUse--
	}
	d.queue = slices.DeleteFunc(d.queue, func(x *cmTurn) bool { return x == t })
	d.grantLocked()
}

// unlock unlocks t's domain, giving its lease back (outside the lock) once
// the process's turn is over.
func (t *cmTurn) unlock() {
	release := t.leaveLeaseLocked()
	t.d.mu.Unlock()
	if release != nil {
		release()
	}
}

// learnLocked updates the domain with an attempt's end: the moving average
// of conflicts, the gate's state and its width (at most maxWidth).
func (d *cmDomain) learnLocked(conflict bool, admit uint64, maxWidth int) {
	d.rate *= 1 - cmAlpha
	if conflict {
		d.rate += cmAlpha
	}
	switch {
	case d.width == 0:
		if conflict && d.rate > cmMaxRate && maxWidth > 1 {
			// Half the attempts now in (they keep their places): a hot
			// row halves down to 1 in a few conflicts, a domain whose
			// conflicts only brush the quarter stays wide.
			d.width, d.streak, d.fails = min(max(1, d.inUse/2), maxWidth), 0, 0
			d.narrowed = d.admits
		}
	case conflict && d.rate > cmMaxRate: // a rarer conflict neither narrows nor holds the width
		d.streak = 0
		// Once per generation: the attempts admitted before the last
		// narrowing ran at the old width, and a burst of their conflicts
		// (PostgreSQL's SSI fails several at once) says nothing of the new.
		if d.width > 1 && admit > d.narrowed {
			d.width /= 2
			d.fails = min(d.fails+1, cmMaxFails)
			d.narrowed = d.admits
		}
	case conflict: // under cmMaxRate: nothing changes
	default:
		d.streak++
		if d.streak >= cmStreak*d.width<<d.fails {
			d.width, d.streak = 2*d.width, 0
			if d.width >= maxWidth { // contention is over: the gate opens
				d.width, d.lease.wanted = 0, false
			}
		}
	}
}

// paceLocked learns from an attempt that no other attempt of this domain
// overlapped: a conflict doubles the pace and returns a pause of up to it,
// jittered, shrinking with the call's age, taken in the caller's place; a
// commit decays the pace.
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

// cmLease is a domain's database lease (AdapterLease), under the domain's
// mutex: real time, whatever WithClock says.
type cmLease struct {
	wanted  bool          // a lone attempt conflicted since the gate closed
	taking  bool          // an admitted attempt is taking it
	release func()        // gives the held lease back; nil: not held
	users   int           // attempts running under it
	at      time.Time     // when it was taken
	over    bool          // the process's turn is over: no new users
	rest    time.Time     // no lease before then
	change  chan struct{} // closed when it is taken, given back or not had
}

func (l *cmLease) changedLocked() {
	if l.change != nil {
		close(l.change)
		l.change = nil
	}
}

// useLease runs the admitted attempt under the domain's lease when the
// domain wants one: it joins its process's turn, or takes the lease if
// nobody holds or takes it, or waits until it can do either. It returns
// whether it waited. When the lease cannot be had, the attempt goes on
// without it.
func (t *cmTurn) useLease(ctx context.Context) (waited bool, err error) {
	d, l := t.d, &t.d.lease
	for {
		d.mu.Lock()
		switch {
		case !l.wanted || time.Now().Before(l.rest):
			d.mu.Unlock()
			return waited, nil
		case l.release != nil && !l.over:
			l.users++
			t.leased = true
			d.mu.Unlock()
			return waited, nil
		case l.release == nil && !l.taking:
			l.taking = true
			d.mu.Unlock()
			return true, t.takeLease(ctx)
		}
		if l.change == nil {
			l.change = make(chan struct{})
		}
		change := l.change
		d.mu.Unlock()
		waited = true
		select {
		case <-change:
		case <-ctx.Done():
			return true, context.Cause(ctx)
		}
	}
}

// takeLease takes the domain's lease for the process, waiting at most
// cmLeaseWait; when the adapter cannot lease, or the lease is not had by
// then, the domain goes without for cmLeaseRest.
func (t *cmTurn) takeLease(ctx context.Context) error {
	d, l := t.d, &t.d.lease
	lctx, cancel := context.WithTimeout(ctx, cmLeaseWait)
	release, err := t.lease.Lease(lctx, "\x00domain\x00"+t.key)
	cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	l.taking = false
	l.changedLocked()
	switch {
	case err == nil:
		l.release, l.at, l.users, l.over = release, time.Now(), 1, false
		t.leased = true
		return nil
	case ctx.Err() != nil:
		return context.Cause(ctx)
	}
	l.rest = time.Now().Add(cmLeaseRest)
	return nil
}

// leaveLeaseLocked ends the attempt's use of the lease, if any, and
// returns the lease's release once the process's turn is over and its
// last user out: after cmLeaseTurn, or when the gate opened, or when none
// of the process's attempts of the domain is in or waiting.
func (t *cmTurn) leaveLeaseLocked() func() {
	d, l := t.d, &t.d.lease
	if t.leased {
		t.leased = false
		l.users--
	}
	if l.release == nil {
		return nil
	}
	l.over = l.over || time.Since(l.at) >= cmLeaseTurn || d.width == 0 || d.inUse == 0 && len(d.queue) == 0
	if !l.over || l.users > 0 {
		return nil
	}
	release := l.release
	l.release, l.over = nil, false
	l.changedLocked()
	return release
}
