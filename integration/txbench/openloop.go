package main

import (
	"context"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// openLoop is the open-loop mode of one process (-rate): calls arrive at a
// fixed rate whatever the workers' pace, wait in a queue for a free worker,
// and are timed and given their deadline from their arrival. Its fields are
// exported for the children's specs.
type openLoop struct {
	// Rate is the process's arrivals per second; 0: the closed loop.
	Rate float64
	// Poisson spaces the arrivals with exponential gaps (a Poisson
	// process); otherwise evenly.
	Poisson bool
	// MaxInflight bounds the calls queued or running at once; an arrival
	// beyond it is dropped.
	MaxInflight int
}

// share returns the part of o of a process running workers of n workers:
// the rate and the in-flight bound in proportion (the bound at least 1).
func (o openLoop) share(workers, n int) openLoop {
	o.Rate = o.Rate * float64(workers) / float64(n)
	o.MaxInflight = max(1, o.MaxInflight*workers/n)
	return o
}

// arrival is one call of the open loop: its id and when it arrived.
type arrival struct {
	id int64
	at time.Time
}

// arrivals yields the offsets from the run's start of the successive
// arrivals of an open loop.
type arrivals struct {
	o   openLoop
	rnd *rand.Rand
	k   int
	t   float64 // seconds since the start of the last arrival (Poisson)
}

// newArrivals returns the arrivals of o, the same for a given seed and
// stream (the process's first worker).
func newArrivals(o openLoop, seed uint64, stream int) *arrivals {
	return &arrivals{o: o, rnd: rand.New(rand.NewPCG(seed, uint64(stream)+1<<50))}
}

// next returns the offset of the next arrival: k/rate for the k-th (from 0)
// when even, the sum of k+1 exponential gaps of mean 1/rate when Poisson.
func (a *arrivals) next() time.Duration {
	if a.o.Poisson {
		a.t += a.rnd.ExpFloat64() / a.o.Rate
	} else {
		a.t = float64(a.k) / a.o.Rate
	}
	a.k++
	return time.Duration(math.Round(a.t * float64(time.Second)))
}

// schedule queues the arrivals from start until end as the calls of the
// streams (workers' ids) first..first+n-1 in turn: arrival k is call k/n of
// stream first+k%n. It waits for each arrival's time with sleepUntil, which
// reports false when the run stops (then schedule returns). An arrival that
// finds o.MaxInflight calls queued or running (inflight, which the servers
// decrement after each call) is dropped; schedule returns their number.
// queue must hold o.MaxInflight calls, so that sending never blocks.
func schedule(a *arrivals, start, end time.Time, first, n int, inflight *atomic.Int64, queue chan<- arrival,
	sleepUntil func(time.Time) bool) (dropped int64) {
	for k := 0; ; k++ {
		at := start.Add(a.next())
		if !at.Before(end) || !sleepUntil(at) {
			return dropped
		}
		if inflight.Load() >= int64(a.o.MaxInflight) {
			dropped++
			continue
		}
		inflight.Add(1)
		queue <- arrival{id: callID(first+k%n, k/n), at: at}
	}
}

// sleepUntil waits until t or until ctx ends, and reports whether ctx is
// still alive.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
