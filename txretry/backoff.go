package txretry

import (
	"math"
	"time"
)

// Backoff decides how long to wait before a retry. Implementations must be
// stateless (a pure function of their arguments), so that one value can be
// shared by any number of concurrent calls.
type Backoff interface {
	// Delay returns the wait before retry number retry (1 for the wait after
	// the first attempt failed). rnd is uniformly distributed in [0, 1) and
	// comes from the call's random source (see WithRand); a backoff without
	// jitter ignores it. A negative result counts as zero.
	Delay(retry int, rnd float64) time.Duration
}

// BackoffFunc adapts a function to the Backoff interface.
type BackoffFunc func(retry int, rnd float64) time.Duration

// Delay calls f.
func (f BackoffFunc) Delay(retry int, rnd float64) time.Duration { return f(retry, rnd) }

// Constant waits d before every retry.
func Constant(d time.Duration) Backoff {
	return BackoffFunc(func(int, float64) time.Duration { return d })
}

// Exponential waits base, 2*base, 4*base, ... before retries 1, 2, 3, ...;
// it saturates instead of overflowing. Compose it with Capped and FullJitter.
func Exponential(base time.Duration) Backoff {
	return BackoffFunc(func(retry int, _ float64) time.Duration {
		if retry < 1 {
			retry = 1
		}
		if base <= 0 {
			return 0
		}
		if retry-1 >= 62 || base > time.Duration(math.MaxInt64>>(retry-1)) {
			return time.Duration(math.MaxInt64)
		}
		return base << (retry - 1)
	})
}

// Capped limits the delays of b to at most max. A nil b counts as no delay.
func Capped(max time.Duration, b Backoff) Backoff {
	b = orZero(b)
	return BackoffFunc(func(retry int, rnd float64) time.Duration {
		return min(b.Delay(retry, rnd), max)
	})
}

func orZero(b Backoff) Backoff {
	if b == nil {
		return Constant(0)
	}
	if f, ok := b.(BackoffFunc); ok && f == nil {
		return Constant(0)
	}
	return b
}

// FullJitter waits a uniformly random fraction of b's delay ("full jitter"),
// which spreads conflicting callers apart so they do not collide again. A
// nil b counts as no delay.
func FullJitter(b Backoff) Backoff {
	b = orZero(b)
	return BackoffFunc(func(retry int, rnd float64) time.Duration {
		return time.Duration(rnd * float64(b.Delay(retry, rnd)))
	})
}

// Default backoff parameters: full jitter over an exponential delay from
// DefaultBackoffBase, capped at DefaultBackoffCap.
const (
	DefaultBackoffBase = 2 * time.Millisecond
	DefaultBackoffCap  = 250 * time.Millisecond
)

// DefaultBackoff returns the backoff used when WithBackoff is not given:
// FullJitter(Capped(DefaultBackoffCap, Exponential(DefaultBackoffBase))).
func DefaultBackoff() Backoff { return defaultBackoff }

var defaultBackoff = FullJitter(Capped(DefaultBackoffCap, Exponential(DefaultBackoffBase)))

// connLossBackoff is the wait before a retry after a connection loss, by
// the number of losses in a row (see WithRetryOnConnectionLoss), and
// between a verifier's tries: composed like the default, from 50 ms to 1 s.
var connLossBackoff = FullJitter(Capped(connLossBackoffCap, Exponential(connLossBackoffBase)))

const (
	connLossBackoffBase = 50 * time.Millisecond
	connLossBackoffCap  = time.Second
)
