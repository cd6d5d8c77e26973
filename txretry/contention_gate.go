package txretry

// A conflict domain's gate: when it closes, how it admits, and the pace
// and the lease after conflicts with other processes. Its width is the
// controller's (contention_control.go). See contention.md.

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The gate's tuning; contention.md gives the reason for each.
const (
	cmStall = 2 * cmMaxPace // a gate that admits nobody this long widens by one

	cmMinPace      = 500 * time.Microsecond // a pace doubles from here...
	cmMaxPace      = 100 * time.Millisecond // ...up to here
	cmPacePatience = 200 * time.Millisecond // a call this old no longer pauses
	cmPaceDecay    = 0.9                    // a lone commit keeps this much of the pace
)

// arrivals numbers calls at their first wait at a gate: a retry goes
// before every call that arrived after its own.
var arrivals atomic.Uint64

// cmDomain is one conflict domain of a manager, under its mutex.
type cmDomain struct {
	mu     sync.Mutex
	width  int       // attempts in at once; 0: the gate is open, they go straight in
	inUse  int       // attempts in, and callers pausing in their place
	peak   int       // the most attempts in at once while open: the width the gate closes at
	queue  []*cmTurn // waiting, by arrival
	admits uint64    // attempts admitted through the gate
	ctl    cmControl // finds the width
	pace   time.Duration
	lease  cmLease
	// foreign: an attempt without a lease met another process since the
	// gate closed; the gate stays at width 1.
	foreign bool
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
	m       *ContentionManager
	d       *cmDomain
	key     string       // d's name, for its lease
	lease   AdapterLease // nil: the adapter cannot lease
	since   time.Time    // the call's start, for the pace's patience
	rand    func() float64
	arrival uint64        // 0 until the call first waits
	ready   chan struct{} // closed when the gate admits it from the queue
	admit   uint64        // the domain's admits when this attempt entered; 0: it went straight in
	started uint64        // the manager's starts when this attempt entered
	alone   bool          // no other gated attempt of the manager was in when this one entered
	running bool          // the attempt counts in the manager's running
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
		if t.leased, w, err = t.d.lease.join(ctx, t.takeLease); err != nil {
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
				// Stood still: the attempts inside may wait for the
				// callers outside.
				d.setWidthLocked(d.width+1, true, t.m.maxWidth())
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
		d.peak = max(d.peak, d.inUse)
		t.admit, t.held = 0, true
	default:
		if t.arrival == 0 {
			t.arrival = arrivals.Add(1)
		}
		if len(d.queue) == 0 && d.inUse < d.width {
			d.enterLocked(t)
			return true
		}
		d.ctl.waited = true
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

// start counts t's attempt, admitted through a gate, in its manager's
// running attempts: an attempt of an open domain does not conflict often
// enough to be another's cause.
func (t *cmTurn) start() {
	t.started = t.m.starts.Add(1)
	t.alone = t.m.running.Add(1) == 1
	t.running = true
}

// stop ends what start began, and reports whether no other gated attempt
// of the manager overlapped t's.
func (t *cmTurn) stop() bool {
	if !t.running {
		return false
	}
	t.running = false
	alone := t.alone && t.m.starts.Load() == t.started
	t.m.running.Add(-1)
	return alone
}

func (d *cmDomain) enterLocked(t *cmTurn) {
	d.inUse++
	d.admits++
	t.admit, t.held = d.admits, true
	t.start()
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
	if t.stop() {
		// No other gated attempt of this manager overlapped: a conflict
		// came from elsewhere.
		pause = d.paceLocked(conflict, now, t.since, t.rand)
		if conflict && t.lease != nil {
			d.lease.want(true)
		} else if conflict && !d.foreign {
			// Paced only: each process would widen to take a larger
			// share of the commits, to the others' loss.
			d.foreign = true
			d.setWidthLocked(1, true, t.m.maxWidth())
		}
	}
	if pause == 0 {
		d.inUse--
		t.held = false
	}
	d.learnLocked(conflict, t.admit, now, t.m.maxWidth())
	d.grantLocked()
	return pause, d.width > 0
}

func (t *cmTurn) cancel() {
	d := t.d
	d.mu.Lock()
	defer t.unlock()
	t.stop()
	if t.held {
		t.held = false
		d.inUse--
	}
	d.queue = slices.DeleteFunc(d.queue, func(x *cmTurn) bool { return x == t })
	d.grantLocked()
}

// unlock unlocks t's domain, giving its lease back (outside the lock) once
// the process's turn is over: after cmLeaseTurn, or when the gate opened,
// or when none of the process's attempts of the domain is in or waiting.
func (t *cmTurn) unlock() {
	d := t.d
	release := d.lease.leave(t.leased, d.width == 0 || d.inUse == 0 && len(d.queue) == 0)
	t.leased = false
	d.mu.Unlock()
	if release != nil {
		release()
	}
}

// takeLease takes the domain's lease through the adapter, named by the
// domain.
func (t *cmTurn) takeLease(ctx context.Context) (func(), error) {
	return t.lease.Lease(ctx, "\x00domain\x00"+t.key)
}

// paceLocked learns from an attempt that no other attempt of its manager
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
