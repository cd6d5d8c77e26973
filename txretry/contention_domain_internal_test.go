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

// conflictsToClose in a row close a domain's gate: the fewest that lift
// the moving average (1/64 per attempt) over cmMaxRate (1/4).
const conflictsToClose = 19

// closeDomain runs conflicting attempts of t until its domain's gate closes.
func (t *cmTurn) closeDomain(tb testing.TB) {
	tb.Helper()
	for range conflictsToClose {
		t.attempt(tb, true)
	}
	if t.d.width == 0 {
		tb.Fatalf("%d conflicts in a row left the gate open", conflictsToClose)
	}
}

func newTurn(m *ContentionManager, label string) *cmTurn {
	return &cmTurn{d: m.domain(domainKey(label, nil)), max: m.maxWidth(), since: t0, rand: func() float64 { return 1 }}
}

// A domain closes its gate once more than a quarter of its recent attempts
// conflict, and not for rarer ones (PostgreSQL's SERIALIZABLE transfers
// among many rows lose about a tenth).
func TestDomainGateClosesOnFrequentConflictsOnly(t *testing.T) {
	m := new(ContentionManager)
	rare := newTurn(m, "rare")
	for i := range 2000 {
		rare.attempt(t, i%7 == 0) // 14% of attempts conflict
	}
	if rare.d.width > 0 {
		t.Fatalf("a domain with 14%% conflicts closed its gate (rate %.3f)", rare.d.rate)
	}
	hot := newTurn(m, "hot")
	for range conflictsToClose - 1 {
		hot.attempt(t, true)
	}
	if hot.d.width > 0 {
		t.Fatalf("%d conflicts closed the gate", conflictsToClose-1)
	}
	hot.attempt(t, true)
	if hot.d.width != 1 {
		t.Fatalf("width %d (0: open) after %d conflicts in a row, want closed at 1", hot.d.width, conflictsToClose)
	}
	if rare.d.width > 0 {
		t.Fatal("another domain's conflicts closed this one's gate")
	}
}

// A closed gate doubles after a streak of 16 x width commits, each
// narrowing doubles the streak the next widening needs, and the gate opens
// once it has widened to the manager's maximum.
func TestDomainGateWidensNarrowsAndOpens(t *testing.T) {
	m, _ := NewContentionManager(8)
	hot := newTurn(m, "hot")
	hot.closeDomain(t)
	commits := func(n int) {
		for range n {
			hot.attempt(t, false)
		}
	}
	commits(cmStreak - 1)
	if hot.d.width != 1 {
		t.Fatalf("width %d after %d commits, want 1", hot.d.width, cmStreak-1)
	}
	commits(1)
	if hot.d.width != 2 {
		t.Fatalf("width %d after a streak, want 2", hot.d.width)
	}
	// A conflict while the rate is high halves the width.
	hot.d.rate = 0.5
	hot.attempt(t, true)
	if hot.d.width != 1 || hot.d.fails != 1 {
		t.Fatalf("width %d, fails %d after a conflict, want 1 and 1", hot.d.width, hot.d.fails)
	}
	hot.d.rate = 0
	commits(2*cmStreak - 1) // the narrowing doubled the streak
	if hot.d.width != 1 {
		t.Fatalf("width %d, want 1 until a doubled streak", hot.d.width)
	}
	commits(1 + 2*cmStreak*2) // 1 -> 2 -> 4
	if hot.d.width != 4 {
		t.Fatalf("width %d (0: open), want 4 and closed", hot.d.width)
	}
	commits(2 * cmStreak * 4) // 4 -> 8, the maximum: the gate opens
	if hot.d.width > 0 {
		t.Fatalf("the gate stays closed at width %d, the maximum", hot.d.width)
	}
}

// A closed gate narrows once per generation: the conflicts of attempts
// admitted before it last narrowed (a burst, as PostgreSQL's SSI fails
// several concurrent transactions at once) halve it once, and only an
// attempt admitted at the new width can halve it again.
func TestGateNarrowsOncePerGeneration(t *testing.T) {
	m := new(ContentionManager)
	hot := newTurn(m, "hot")
	hot.closeDomain(t)
	d := hot.d
	d.width = 8
	var burst []*cmTurn
	for range 8 {
		x := newTurn(m, "hot")
		if _, err := x.enter(context.Background(), -1); err != nil {
			t.Fatal(err)
		}
		burst = append(burst, x)
	}
	d.mu.Lock()
	d.rate = 0.5 // a conflict narrows
	d.mu.Unlock()
	for _, x := range burst {
		x.done(true, t0)
	}
	if d.width != 4 || d.fails != 1 {
		t.Fatalf("width %d, fails %d after a burst of 8 conflicts admitted at width 8; want 4 and 1", d.width, d.fails)
	}
	burst[0].attempt(t, true) // admitted at width 4
	if d.width != 2 || d.fails != 2 {
		t.Fatalf("width %d, fails %d after a conflict at the new width; want 2 and 2", d.width, d.fails)
	}
}

// Conflicts while the rate stays under cmMaxRate neither narrow a closed
// gate nor restart its streak: a domain whose conflicts do not fall with
// the width (PostgreSQL's SERIALIZABLE transfers among many rows lose a
// tenth of their attempts at any width) widens back and opens.
func TestDomainGateWidensThroughRareConflicts(t *testing.T) {
	m, _ := NewContentionManager(4)
	d := newTurn(m, "noisy")
	d.closeDomain(t)
	d.d.rate = 0
	for i := 0; d.d.width > 0; i++ {
		if i == 2000 {
			t.Fatalf("still closed at width %d after %d attempts, a tenth of them conflicting", d.d.width, i)
		}
		d.attempt(t, i%10 == 0)
		if d.d.rate > cmMaxRate {
			t.Fatalf("rate %.3f over cmMaxRate: the test's conflicts are not rare", d.d.rate)
		}
	}
}

// A conflict of an attempt that ran alone in its gate doubles the pace from
// 500 µs up to 100 ms; a lone commit keeps nine tenths of it; the pause
// shrinks with the call's age and is none once it is 200 ms old. An attempt
// that overlapped another learns nothing about the pace.
func TestPaceDoublesDecaysAndShrinksWithAge(t *testing.T) {
	m := new(ContentionManager)
	hot := newTurn(m, "hot")
	hot.closeDomain(t) // from here, lone attempts pace
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
	d.width, d.rate = 2, 0 // conflicts below the share do not narrow
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

// A gate closes at half the attempts then in flight, not at 1: a domain
// whose conflicts only brush the quarter stays wide, and a hot row halves
// down to 1 within a few more conflicts. The attempts in flight keep their
// places: a caller queues until fewer than the width are in.
func TestDomainGateClosesAtHalfTheAttemptsInFlight(t *testing.T) {
	m := new(ContentionManager)
	hot := newTurn(m, "hot")
	var running []*cmTurn
	for range 20 { // twenty attempts in flight
		r := newTurn(m, "hot")
		_, _ = r.enter(context.Background(), -1)
		running = append(running, r)
	}
	hot.closeDomain(t)
	if hot.d.width != 10 {
		t.Fatalf("closed at width %d with 20 attempts in flight, want 10", hot.d.width)
	}
	if n := hot.d.inUse; n != 20 {
		t.Fatalf("%d places in use after the gate closed, want the 20 attempts still in", n)
	}
	late := newTurn(m, "hot")
	lq := queue(t, hot.d, late, context.Background())
	for i, r := range running { // a burst from before the closing: no narrowing
		r.done(true, t0)
		if i == 9 {
			select {
			case <-lq:
				t.Fatal("a queued caller entered with 10 attempts in, at width 10")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if err := <-lq; err != nil {
		t.Fatal(err)
	}
	late.cancel()
	if n := hot.d.inUse; n != 0 || hot.d.width != 10 {
		t.Fatalf("%d places in use, width %d after the attempts in flight conflicted; want 0 and 10", n, hot.d.width)
	}
	for _, want := range []int{5, 2, 1, 1} {
		hot.attempt(t, true)
		if hot.d.width != want {
			t.Fatalf("width %d after another conflict, want %d", hot.d.width, want)
		}
	}
}
