package core

import (
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"
)

type handle struct{ _ [16]byte }

func counter() func() any {
	n := 0
	return func() any { n++; return n }
}

func TestPerHandleKeepsOneValuePerHandle(t *testing.T) {
	var m sync.Map
	newV := counter()
	a, b := new(handle), new(handle)
	if got := []any{PerHandle(&m, a, newV), PerHandle(&m, b, newV), PerHandle(&m, a, newV), PerHandle(&m, b, newV)}; got[0] != 1 || got[1] != 2 || got[2] != 1 || got[3] != 2 {
		t.Fatalf("values %v, want [1 2 1 2]", got)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}

// An entry left at p's address by a collected handle, whose cleanup has not
// run yet, is not p's: p gets a value of its own, and the stale entry's
// cleanup cannot delete it.
func TestPerHandleIgnoresAnEntryOfACollectedHandle(t *testing.T) {
	var m sync.Map
	p := new(handle)
	addr := uintptr(unsafe.Pointer(p))
	stale := &handleEntry[handle]{v: "stale"} // its weak pointer is nil, as a collected handle's is
	m.Store(addr, stale)
	if v := PerHandle(&m, p, func() any { return "p's" }); v != "p's" {
		t.Fatalf("value %v, want p's own", v)
	}
	m.CompareAndDelete(addr, stale) // what the stale entry's cleanup does
	if v := PerHandle(&m, p, func() any { return "another" }); v != "p's" {
		t.Fatalf("value %v after the stale entry's cleanup, want p's own", v)
	}
	runtime.KeepAlive(p)
}

func TestPerHandleDropsTheEntryOfACollectedHandle(t *testing.T) {
	var m sync.Map
	var addr uintptr
	func() {
		p := new(handle)
		addr = uintptr(unsafe.Pointer(p))
		PerHandle(&m, p, counter())
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, ok := m.Load(addr); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the entry outlived its collected handle")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
