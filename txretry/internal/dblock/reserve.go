package dblock

import "sync"

// reserved counts, per pool, the connections its leases hold.
var reserved struct {
	sync.Mutex
	n map[any]int
}

// Reserve reserves a connection of pool, of maxConns at most (0 or less:
// no limit), for a lease, so that at least one is never a lease's: leased
// attempts of two domains that each held a connection for a lease and
// waited for another for BEGIN could wait for each other for ever. It
// reports false when that one would be taken; give hands the reservation
// back.
func Reserve(pool any, maxConns int) (give func(), ok bool) {
	if maxConns <= 0 {
		return func() {}, true
	}
	reserved.Lock()
	defer reserved.Unlock()
	if reserved.n[pool]+1 >= maxConns {
		return nil, false
	}
	if reserved.n == nil {
		reserved.n = map[any]int{}
	}
	reserved.n[pool]++
	var once sync.Once
	return func() {
		once.Do(func() {
			reserved.Lock()
			defer reserved.Unlock()
			if reserved.n[pool]--; reserved.n[pool] == 0 {
				delete(reserved.n, pool)
			}
		})
	}, true
}
