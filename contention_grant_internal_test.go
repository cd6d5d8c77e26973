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
			errc <- m.acquire(ctx, &ticket)
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
	m, err := NewContentionManager(1)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var a, b, c cmTicket
	if !m.tryAcquire(&a) { // call A holds the gate
		t.Fatal("an open gate refused the first call")
	}
	admitted := make(chan string, 3)
	queue := func(name string, ticket *cmTicket) {
		n := m.Queued()
		go func() {
			if err := m.acquire(context.Background(), ticket); err != nil {
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
	m.release(&a, true, time.Millisecond, now) // A conflicts: B's turn
	if got := <-admitted; got != "B" {
		t.Fatalf("%s admitted, want B", got)
	}
	queue("A", &a) // A's retry
	m.release(&b, false, time.Millisecond, now)
	if got := <-admitted; got != "A" {
		t.Fatalf("%s admitted after B, want A's retry before C, which arrived later", got)
	}
	m.release(&a, false, time.Millisecond, now)
	if got := <-admitted; got != "C" {
		t.Fatalf("%s admitted, want C", got)
	}
	m.release(&c, false, time.Millisecond, now)
}
