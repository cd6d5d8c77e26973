package txretry

import (
	"context"
	"errors"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

// attempt runs one attempt of turn t through the gate (or straight in) and
// ends it with conflict, returning the pause.
func (t *cmTurn) attempt(tb testing.TB, conflict bool) time.Duration {
	tb.Helper()
	if _, err := t.enter(context.Background(), -1); err != nil {
		tb.Fatal(err)
	}
	pause, _ := t.done(conflict, t0)
	if pause > 0 {
		t.cancel()
	}
	return pause
}

// closeDomain makes t's domain conflict until its gate closes: at once, at
// width 1 when t's attempts are the only ones. The controller is then held
// at that width: no window counts (freeze).
func (t *cmTurn) closeDomain(tb testing.TB) {
	tb.Helper()
	t.attempt(tb, true)
	if t.d.width == 0 {
		tb.Fatal("a conflict left the gate open")
	}
	freeze(t.d)
}

// freeze holds d's width where it is: its controller counts no attempt.
func freeze(d *cmDomain) {
	d.mu.Lock()
	d.ctl.gen = ^uint64(0)
	d.mu.Unlock()
}

// newTurn returns a call of label on m whose deadline is 1 ms after its
// start: its domain's first conflict spaces it half that time, which closes
// the gate (spaceLocked). openTurn's call has no deadline.
func newTurn(m *ContentionManager, label string) *cmTurn {
	t := openTurn(m, label)
	t.end = t0.Add(time.Millisecond)
	return t
}

func openTurn(m *ContentionManager, label string) *cmTurn {
	return &cmTurn{m: m, d: m.domain(domainKey(label, nil)), since: t0, rand: func() float64 { return 1 }}
}

// A conflict of an attempt that no other gated attempt of its manager
// overlapped doubles the pace from 500 µs up to 100 ms; a lone commit keeps
// nine tenths of it; the pause shrinks with the call's age and is none once
// it is 200 ms old. An attempt that overlapped another learns nothing about
// the pace.
func TestPaceDoublesDecaysAndShrinksWithAge(t *testing.T) {
	m := new(ContentionManager)
	hot := newTurn(m, "hot")
	hot.closeDomain(t)   // from here, lone attempts pace
	hot.d.foreign = true // and the gate stays at width 1
	var got []time.Duration
	for range 10 {
		got = append(got, hot.attempt(t, true))
	}
	for i, p := range got {
		want := min(cmMinPace<<i, cmMaxPace)
		if p != want {
			t.Fatalf("pauses %v, want doubling from %v to %v", got, cmMinPace, cmMaxPace)
		}
	}
	hot.attempt(t, false)
	if want := time.Duration(float64(cmMaxPace) * cmPaceDecay); hot.d.pace != want {
		t.Fatalf("pace %v after a lone commit, want %v", hot.d.pace, want)
	}
	for range 60 {
		hot.attempt(t, false)
	}
	if hot.d.pace != 0 {
		t.Fatalf("pace %v after 60 lone commits, want none", hot.d.pace)
	}
	hot.since = t0.Add(-cmPacePatience / 2)
	if p := hot.attempt(t, true); p != cmMinPace/2 {
		t.Fatalf("pause %v at half the patience, want %v", p, cmMinPace/2)
	}
	hot.since = t0.Add(-cmPacePatience)
	if p := hot.attempt(t, true); p != 1 {
		t.Fatalf("pause %v past the patience, want 1 ns (at once, in its place)", p)
	}
	a, b := newTurn(m, "hot"), newTurn(m, "hot")
	hot.d.width = 2
	_, _ = a.enter(context.Background(), -1)
	_, _ = b.enter(context.Background(), -1)
	pace := hot.d.pace
	if p, _ := a.done(true, t0); p != 0 || hot.d.pace != pace {
		t.Fatalf("an overlapped conflict paused %v and moved the pace %v -> %v", p, pace, hot.d.pace)
	}
	b.done(false, t0)
}

// queue starts t's wait at the gate and returns a channel that gets its
// result, once t is queued.
func queue(t *testing.T, d *cmDomain, turn *cmTurn, ctx context.Context) chan error {
	t.Helper()
	d.mu.Lock()
	n := len(d.queue)
	d.mu.Unlock()
	errc := make(chan error, 1)
	go func() {
		_, err := turn.enter(ctx, -1)
		errc <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		d.mu.Lock()
		queued := len(d.queue)
		d.mu.Unlock()
		if queued == n+1 {
			return errc
		}
		if time.Now().After(deadline) {
			t.Fatal("the caller did not queue")
		}
	}
}

// A retry keeps its call's place: it is admitted before calls that arrived
// after its own, however long they have waited.
func TestRetryKeepsItsCallsPlace(t *testing.T) {
	m := new(ContentionManager)
	a := newTurn(m, "hot")
	a.closeDomain(t) // width 1
	d := a.d
	d.width = 2
	x, b, c := newTurn(m, "hot"), newTurn(m, "hot"), newTurn(m, "hot")
	_, _ = a.enter(context.Background(), -1)
	_, _ = x.enter(context.Background(), -1) // A and X hold the gate
	bq := queue(t, d, b, context.Background())
	cq := queue(t, d, c, context.Background())
	if p, _ := a.done(true, t0); p != 0 { // A conflicts beside X: B's turn
		t.Fatal("A's conflict overlapped X's attempt, but A was paused as if it ran alone")
	}
	if err := <-bq; err != nil {
		t.Fatal(err)
	}
	aq := queue(t, d, a, context.Background()) // A's retry
	b.done(false, t0)
	if err := <-aq; err != nil {
		t.Fatal(err)
	}
	select {
	case <-cq:
		t.Fatal("C, which arrived after A, was admitted before A's retry")
	default:
	}
	a.done(false, t0)
	if err := <-cq; err != nil {
		t.Fatal(err)
	}
	c.done(false, t0)
	x.done(false, t0)
}

// A caller whose context ends just as it is admitted passes its place on:
// otherwise the gate would stay closed for good.
func TestAdmittedWhileGivingUpPassesThePlaceOn(t *testing.T) {
	gaveUp := 0
	for range 20 {
		m := new(ContentionManager)
		holder := newTurn(m, "hot")
		holder.closeDomain(t)
		_, _ = holder.enter(context.Background(), -1)
		d := holder.d
		ctx, cancel := context.WithCancel(context.Background())
		errc := queue(t, d, newTurn(m, "hot"), ctx)
		time.Sleep(5 * time.Millisecond) // the waiter blocks in its select
		d.mu.Lock()
		cancel() // the waiter wakes on its context, and waits for d.mu...
		d.inUse--
		d.grantLocked() // ...while the holder leaves and admits it
		d.mu.Unlock()
		err := <-errc
		d.mu.Lock()
		inUse := d.inUse
		d.mu.Unlock()
		switch {
		case err == nil && inUse != 1:
			t.Fatalf("admitted, but %d place(s) in use, want 1", inUse)
		case err != nil && !errors.Is(err, context.Canceled):
			t.Fatalf("err = %v, want context.Canceled", err)
		case err != nil && inUse != 0:
			t.Fatalf("gave up after being admitted, and %d place(s) stay in use, want 0", inUse)
		}
		if err != nil {
			gaveUp++
		}
	}
	if gaveUp == 0 {
		t.Fatal("no waiter gave up after being admitted: the test did not exercise that path")
	}
}

// The domains of calls: the label when there is one, else where fn was
// written, which closures written at one place share, even when the
// compiler copied them into the callers of an inlined function.
func TestDomainKeys(t *testing.T) {
	mk := func(n int) func() int { return func() int { return n } }
	f1, f2, other := mk(1), mk(2), func() {}
	switch {
	case domainKey("", f1) != domainKey("", f2):
		t.Fatal("two closures from one place are two domains")
	case domainKey("", f1) == domainKey("", other):
		t.Fatal("closures from two places share a domain")
	case domainKey("x", f1) != domainKey("x", other):
		t.Fatal("one label, two domains")
	case domainKey("", nil) != domainKey("", 42):
		t.Fatal("calls without a function do not share a domain")
	}
	m := new(ContentionManager)
	for i := range cmMaxDomains + 10 {
		m.domain(domainKey(string(rune('a'+i%26))+time.Duration(i).String(), nil))
	}
	if n := m.count.Load(); n > cmMaxDomains+1 {
		t.Fatalf("%d domains, want at most %d", n, cmMaxDomains+1)
	}
}

// A domain whose attempts commit is never gated, however many run at once;
// its first conflict in a call of 1 ms (newTurn: the spacing is half its
// time) closes the gate as wide as the most attempts it had in at once, so
// that nobody queues yet, and those in keep their places.
func TestDomainGateClosesOnAConflictAtItsPeak(t *testing.T) {
	m := new(ContentionManager)
	var running []*cmTurn
	for range 20 {
		r := newTurn(m, "hot")
		if _, err := r.enter(context.Background(), -1); err != nil {
			t.Fatal(err)
		}
		running = append(running, r)
	}
	for _, r := range running[:10] {
		r.done(false, t0)
		r.cancel()
	}
	d := running[0].d
	for range 1000 { // each a call of its own: a call's third attempt would wait to run alone
		newTurn(m, "hot").attempt(t, false)
	}
	if d.width != 0 {
		t.Fatalf("a domain that never conflicted is gated at width %d", d.width)
	}
	running[10].done(true, t0)
	if d.width != 20 || d.inUse != 9 {
		t.Fatalf("closed at width %d with %d in, want 20 (the peak) and 9", d.width, d.inUse)
	}
	for range 11 { // up to the peak: nobody queues
		x := newTurn(m, "hot")
		if waited, err := x.enter(context.Background(), -1); waited || err != nil {
			t.Fatalf("queued below the peak: %v, %v", waited, err)
		}
	}
}

// A closed gate's window counts only the attempts admitted at its width:
// a burst of ends of attempts admitted at the old one (PostgreSQL's SSI
// fails several at once) says nothing of the new. A window in which nobody
// queued and at most a quarter of the attempts conflicted opens the gate;
// one in which callers queued does not.
func TestGateWindowCountsItsWidthAndOpensWhenItDoesNothing(t *testing.T) {
	m := new(ContentionManager)
	other := newTurn(m, "other") // a gated attempt of another domain runs throughout:
	other.closeDomain(t)         // the conflicts below are not another process's
	if _, err := other.enter(context.Background(), -1); err != nil {
		t.Fatal(err)
	}
	defer other.cancel()
	a := newTurn(m, "hot")
	a.attempt(t, true) // closed at width 1
	d := a.d
	old := newTurn(m, "hot")
	if _, err := old.enter(context.Background(), -1); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.setWidthLocked(2, true, m.maxWidth())
	d.mu.Unlock()
	old.done(true, t0)
	if d.ctl.n != 0 {
		t.Fatal("an attempt admitted at the old width counted in the new width's window")
	}
	for i := range cmWindow + 2*2 - 1 {
		a.attempt(t, i%4 == 0)
	}
	if d.width != 2 {
		t.Fatalf("width %d before the window's end, want 2", d.width)
	}
	a.attempt(t, false)
	if d.width != 0 {
		t.Fatalf("width %d after a window with no queue and a quarter of conflicts, want open", d.width)
	}
	a.attempt(t, true) // closed again at width 1
	holder, waiter := newTurn(m, "hot"), newTurn(m, "hot")
	if _, err := holder.enter(context.Background(), -1); err != nil {
		t.Fatal(err)
	}
	wq := queue(t, d, waiter, context.Background())
	holder.done(false, t0)
	if err := <-wq; err != nil {
		t.Fatal(err)
	}
	waiter.done(false, t0)
	for d.ctl.n != 0 {
		a.attempt(t, false)
	}
	if d.width == 0 {
		t.Fatal("a window in which a caller queued opened the gate")
	}
}

// An open domain's spacing doubles with each conflict from 1 ms up to 1 s
// and a commit keeps nine tenths of it; a retry pauses half to all of it
// (all here: rand is 1), and from its call's third attempt on not at all,
// to run alone. A conflict that doubles it past half its call's time
// closes the gate; in a call without a deadline it never does.
func TestSpacingDoublesDecaysAndClosesPastHalfTheDeadline(t *testing.T) {
	m := new(ContentionManager)
	a := openTurn(m, "k")
	if p := a.attempt(t, true); p != time.Millisecond {
		t.Fatalf("first retry's pause %v, want 1ms", p)
	}
	if p := a.attempt(t, true); p != time.Nanosecond {
		t.Fatalf("pause before the third attempt %v, want none (1ns)", p)
	}
	for range 20 {
		a.attempt(t, true)
	}
	if a.d.spacing != cmMaxSpacing || a.d.width != 0 {
		t.Fatalf("spacing %v, width %d: want %v, the gate open (no deadline)", a.d.spacing, a.d.width, cmMaxSpacing)
	}
	openTurn(m, "k").attempt(t, false)
	if want := time.Duration(float64(cmMaxSpacing) * cmSpacingDecay); a.d.spacing != want {
		t.Fatalf("spacing after a commit %v, want %v", a.d.spacing, want)
	}
	long := openTurn(m, "k")
	long.end = t0.Add(3 * time.Second) // 2 x 1 s is less than its 3 s
	long.attempt(t, true)
	if a.d.width != 0 {
		t.Fatalf("width %d after a conflict of a 3 s call, want the gate open", a.d.width)
	}
	short := openTurn(m, "k")
	short.end = t0.Add(time.Second)
	short.attempt(t, true)
	if a.d.width != 1 {
		t.Fatalf("width %d after a conflict of a 1 s call, want the gate closed at 1", a.d.width)
	}
}

// In an open domain, a call's third attempt runs alone: it waits until the
// attempts in have ended, and a first attempt that arrives meanwhile waits
// behind it, then goes in once it has ended.
func TestThirdAttemptRunsAloneInAnOpenDomain(t *testing.T) {
	m := new(ContentionManager)
	a, b, c := openTurn(m, "k"), openTurn(m, "k"), openTurn(m, "k")
	if _, err := a.enter(context.Background(), -1); err != nil {
		t.Fatal(err)
	}
	b.attempt(t, true) // beside a
	b.attempt(t, true)
	entered := func(x *cmTurn) chan error {
		ch := make(chan error, 1)
		go func() { _, err := x.enter(context.Background(), -1); ch <- err }()
		return ch
	}
	queued := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); m.Queued() != n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("queued %d, want %d", m.Queued(), n)
			}
		}
	}
	bIn := entered(b)
	queued(1)
	cIn := entered(c)
	queued(2)
	a.done(false, t0)
	if err := <-bIn; err != nil {
		t.Fatal(err)
	}
	queued(1) // c waits while b runs alone
	b.done(false, t0)
	if err := <-cIn; err != nil {
		t.Fatal(err)
	}
	c.done(false, t0)
	if a.d.inUse != 0 || a.d.solo || len(a.d.queue) != 0 {
		t.Fatalf("in use %d, solo %v, queued %d after every attempt ended", a.d.inUse, a.d.solo, len(a.d.queue))
	}
}
