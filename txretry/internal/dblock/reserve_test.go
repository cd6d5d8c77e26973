package dblock

import "testing"

// A pool of n connections has n-1 for leases at once; a reservation given
// back (once, however often give is called) makes room again; a pool
// without a limit always has room; pools are counted apart.
func TestReserveKeepsOneConnectionFromLeases(t *testing.T) {
	a, b := new(int), new(int)
	if _, ok := Reserve(a, 1); ok {
		t.Fatal("a pool of one connection reserved it for a lease")
	}
	give, ok := Reserve(a, 3)
	if !ok {
		t.Fatal("first of 3 refused")
	}
	give2, ok := Reserve(a, 3)
	if !ok {
		t.Fatal("second of 3 refused")
	}
	if _, ok := Reserve(a, 3); ok {
		t.Fatal("the third of 3 connections reserved for a lease")
	}
	if g, ok := Reserve(b, 2); !ok {
		t.Fatal("another pool's reservations counted against it")
	} else {
		g()
	}
	give()
	give()
	if g, ok := Reserve(a, 3); !ok {
		t.Fatal("a reservation given back made no room")
	} else {
		g()
	}
	give2()
	if _, ok := Reserve(a, 0); !ok {
		t.Fatal("a pool without a limit refused")
	}
	reserved.Lock()
	defer reserved.Unlock()
	if len(reserved.n) != 0 {
		t.Fatalf("reservations left: %v", reserved.n)
	}
}
