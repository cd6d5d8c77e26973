package txretry

import (
	"context"
	"sync"
	"time"
)

const (
	cmLeaseTurn = 10 * time.Millisecond  // no new attempt starts under a lease this old
	cmLeaseWait = 250 * time.Millisecond // longest wait for a lease
	cmLeaseRest = time.Second            // how long a domain goes without, after no lease
)

// cmLease is a domain's database lease (AdapterLease): its process's turn
// on the domain, on real time whatever WithClock says. Its mutex is taken
// after the domain's, never before.
//
// Not wanted, or resting: attempts run without it. Wanted: the first
// attempt takes it (taking), the others wait; once held, attempts join the
// turn until it is over (after cmLeaseTurn, or when the domain is idle or
// open), and the last user out gives it back. Not had within cmLeaseWait
// (or the adapter cannot): the domain rests for cmLeaseRest.
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

// want makes the domain lease from now on (on), or no longer (its gate
// opened).
func (l *cmLease) want(on bool) {
	l.mu.Lock()
	l.wanted = on
	l.mu.Unlock()
}

func (l *cmLease) changed() {
	if l.change != nil {
		close(l.change)
		l.change = nil
	}
}

// join runs an admitted attempt under the lease when the domain wants
// one: it joins its process's turn, or takes the lease (through take,
// within cmLeaseWait) if nobody holds or takes it, or waits until it can
// do either. When the lease cannot be had, the attempt goes on without it.
func (l *cmLease) join(ctx context.Context, take func(context.Context) (func(), error)) (leased, waited bool, err error) {
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
			leased, err = l.take(ctx, take)
			return leased, true, err
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

// take takes the lease for the process: the caller has set taking.
func (l *cmLease) take(ctx context.Context, take func(context.Context) (func(), error)) (bool, error) {
	lctx, cancel := context.WithTimeout(ctx, cmLeaseWait)
	release, err := take(lctx)
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.taking = false
	l.changed()
	switch {
	case err == nil:
		l.release, l.at, l.users, l.over = release, time.Now(), 1, false
		return true, nil
	case ctx.Err() != nil:
		return false, context.Cause(ctx)
	}
	l.rest = time.Now().Add(cmLeaseRest)
	return false, nil
}

// leave ends an attempt's use of the lease (user: it ran under it) and
// returns the lease's release once the turn is over and its last user out;
// idle: none of the domain's attempts is in or waiting, or its gate is
// open.
func (l *cmLease) leave(user, idle bool) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if user {
		l.users--
	}
	if l.release == nil {
		return nil
	}
	l.over = l.over || time.Since(l.at) >= cmLeaseTurn || idle
	if !l.over || l.users > 0 {
		return nil
	}
	release := l.release
	l.release, l.over = nil, false
	l.changed()
	return release
}
