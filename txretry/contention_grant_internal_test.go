package txretry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A caller whose context ends just as the holder admits it passes its place
// on: otherwise the gate would stay closed for good.
func TestAdmittedWhileGivingUpPassesThePlaceOn(t *testing.T) {
	gaveUp := 0
	for range 20 {
		m, err := NewContentionManager(1)
		if err != nil {
			t.Fatal(err)
		}
		m.mu.Lock()
		m.inUse = 1 // a holder
		m.mu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			var ticket cmTicket
			errc <- m.acquire(ctx, &ticket, systemClock{})
		}()
		for m.Queued() != 1 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond) // the waiter blocks in its select
		m.mu.Lock()
		cancel() // the waiter wakes on its context, and waits for m.mu...
		m.inUse--
		m.grantLocked() // ...while the holder leaves and admits it
		m.mu.Unlock()
		err = <-errc
		m.mu.Lock()
		inUse := m.inUse
		m.mu.Unlock()
		switch {
		case err == nil && inUse != 1: // admitted after all: it holds the place
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

// A retry keeps its call's place: it is admitted before calls that arrived
// after its own, however long they have waited.
func TestRetryKeepsItsCallsPlace(t *testing.T) {
	m, err := NewContentionManager(2)
	if err != nil {
		t.Fatal(err)
	}
	m.width, m.opened = 2, true
	now := time.Now()
	var a, x, b, c cmTicket
	if !m.tryAcquire(&a) || !m.tryAcquire(&x) { // calls A and X hold the gate
		t.Fatal("an open gate refused the first calls")
	}
	admitted := make(chan string, 3)
	queue := func(name string, ticket *cmTicket) {
		n := m.Queued()
		go func() {
			if err := m.acquire(context.Background(), ticket, systemClock{}); err != nil {
				t.Error(err)
			}
			admitted <- name
		}()
		for m.Queued() != n+1 {
			time.Sleep(time.Millisecond)
		}
	}
	queue("B", &b)
	queue("C", &c)
	if m.release(&a, true, time.Millisecond, now, true, nil) > 0 { // A conflicts beside X: B's turn
		t.Fatal("A's conflict overlapped X's attempt, but A was paused as if it ran alone")
	}
	if got := <-admitted; got != "B" {
		t.Fatalf("%s admitted, want B", got)
	}
	queue("A", &a) // A's retry
	m.release(&b, false, time.Millisecond, now, true, nil)
	if got := <-admitted; got != "A" {
		t.Fatalf("%s admitted after B, want A's retry before C, which arrived later", got)
	}
	m.release(&a, false, time.Millisecond, now, true, nil)
	if got := <-admitted; got != "C" {
		t.Fatalf("%s admitted, want C", got)
	}
	m.release(&c, false, time.Millisecond, now, true, nil)
	m.release(&x, false, time.Millisecond, now, true, nil)
}

// handClock's timers fire when the test says so; its time stands still.
type handClock struct {
	now    time.Time
	timers chan chan time.Time // each new timer's channel, in order
}

func (c *handClock) Now() time.Time { return c.now }

func (c *handClock) NewTimer(time.Duration) Timer {
	ch := make(chan time.Time, 1)
	c.timers <- ch
	return handTimer(ch)
}

type handTimer chan time.Time

func (t handTimer) C() <-chan time.Time { return t }
func (t handTimer) Stop() bool          { return true }

// A gate that stands still for a step (no attempt leaves it, its width does
// not change) while callers queue doubles, during slow start and after it:
// the attempts inside may be waiting for the callers outside. Only the
// caller at the head of the queue watches, and a step in which an attempt
// left does not count.
func TestGateWidensWhenItStalls(t *testing.T) {
	m, err := NewContentionManager(0)
	if err != nil {
		t.Fatal(err)
	}
	clock := &handClock{now: time.Unix(1_700_000_000, 0), timers: make(chan chan time.Time, 16)}
	admitted := make(chan string, 3)
	queue := func(name string, ticket *cmTicket) {
		n := m.Queued()
		go func() {
			if err := m.acquire(context.Background(), ticket, clock); err != nil {
				t.Error(err)
			}
			admitted <- name
		}()
		for m.Queued() != n+1 {
			time.Sleep(time.Millisecond)
		}
	}
	next := func() string {
		t.Helper()
		select {
		case name := <-admitted:
			return name
		case <-time.After(5 * time.Second):
			t.Fatalf("nobody admitted within 5 s; width %v, %d queued", m.Width(), m.Queued())
			return ""
		}
	}
	watcher := func(who string) chan time.Time {
		t.Helper()
		select {
		case timer := <-clock.timers:
			return timer
		case <-time.After(5 * time.Second):
			t.Fatalf("%s, at the head of the queue, does not watch for stalls", who)
			return nil
		}
	}
	var a, b, c, d cmTicket
	if !m.tryAcquire(&a) {
		t.Fatal("a fresh gate refused its first call")
	}
	// Slow start: a holds the only place, b and c queue; only b watches.
	queue("b", &b)
	bTimer := watcher("b")
	queue("c", &c)
	bTimer <- clock.now
	if got := next(); got != "b" || m.Width() != 2 {
		t.Fatalf("%s admitted at width %v, want b at 2 after a stalled step", got, m.Width())
	}
	cTimer := watcher("c")
	// b conflicts: slow start ends, the width halves, and c still queues.
	m.release(&b, true, time.Millisecond, clock.now, true, nil)
	cTimer <- clock.now // b left during c's step: no stall
	cTimer = watcher("c")
	if m.Width() != 1 || m.Queued() != 1 {
		t.Fatalf("width %v with %d queued, want 1 with c queued: an attempt left during the step", m.Width(), m.Queued())
	}
	queue("d", &d)
	cTimer <- clock.now // a whole step without anything moving
	if got := next(); got != "c" || m.Width() != 2 {
		t.Fatalf("%s admitted at width %v, want c at 2 after a stalled step", got, m.Width())
	}
	watcher("d") <- clock.now
	if got := next(); got != "d" || m.Width() != 4 {
		t.Fatalf("%s admitted at width %v, want d at 4 after a stalled step", got, m.Width())
	}
	select {
	case <-clock.timers:
		t.Fatal("a timer was made with nobody queued")
	default:
	}
}
