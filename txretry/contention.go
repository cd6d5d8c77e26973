package txretry

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/txretry/txretry/txretry/internal/core"
)

// ContentionManager admits attempts to the database through a FIFO gate
// whose width adapts to conflicts, so that under contention transactions
// queue in order instead of colliding and sleeping blindly, and no caller
// starves. Its width (the number of attempts that may run at once) adapts:
//
//   - A fresh gate starts at 1 and doubles after each generation of
//     attempts without a conflict (1 + 2 + 4 + ... attempts), as TCP's slow
//     start does, until the maximum or the first conflict, which returns it
//     to the width before the last doubling. A burst of callers on a fresh
//     gate then queues instead of colliding all at once.
//   - It halves, never below 1, on a conflict (an attempt that failed with
//     a retryable error, or was cut short by its caller's deadline) once
//     conflicts take more than 1/10 of the recent attempt time, a moving
//     average over about 64 commits (16 x width on a gate wider than 4) in
//     which each attempt weighs what it lasted. A rarer conflict is
//     tolerated. Cheap conflicts halve it at most once per generation of
//     attempts: one of an attempt admitted before the width last narrowed
//     does not narrow it again (as TCP halves its window at most once per
//     round trip), or the attempts still running at the wider width would
//     each halve it. A conflict that cost more than 4 usual commits (a
//     deadlock that PostgreSQL detects only after its 1 s
//     deadlock_timeout) halves it whenever it comes, and is paid back: the
//     streak below starts only after as many commits as the failed attempt
//     lasted.
//   - It widens, up to the maximum, after a streak of 16 x width attempts
//     without a conflict: it doubles if no conflict was tolerated at this
//     width, and otherwise grows by half (2 to 3, 4 to 6), since twice the
//     overlap of a width that already conflicts mostly adds conflicts.
//   - A widening that conflicts push over the share, or that the judge
//     below rejects, is undone: the width returns to what it was. Each
//     one undone in a row doubles the streak that the next widening to
//     that width or beyond needs, up to 64 times, so that probing a
//     single hot row costs about one attempt in a thousand. Widenings to
//     narrower widths do not wait longer.
//   - A gate that stands still while callers queue (no attempt leaves it
//     for 32 usual commits, at least 20 ms) doubles: the attempts inside may
//     be waiting for the callers outside, or for something outside the
//     database, and the queue would otherwise wait until its deadlines.
//     After slow start such a widening is undone as the ones above are.
//   - A widening during which conflicts were tolerated is judged after
//     128 x width attempts: it stays only if it committed at least 5% more
//     per second than the width before it.
//
// So on a single hot row of PostgreSQL the gate stays at 1 (about 1.01
// attempts per commit); where overlapping transactions mostly wait for each
// other's locks instead of failing (InnoDB) it stays wider if that commits
// more; and after a burst of conflicts in an otherwise calm workload it is
// fully open again within a few thousand commits. While conflicts are rare
// the gate is wider than the number of callers and costs one uncontended
// mutex; while they are frequent, callers pass one or a few at a time in
// arrival order. Where a few percent of attempts conflict whatever the
// width (PostgreSQL's SERIALIZABLE at low contention, whose page-level
// predicate locks fail about 10% of 32 concurrent transfers among 10,000
// accounts), it settles at a width that keeps conflicts under the share,
// which has committed 0.89-1.00x the goodput of no gate on the
// development machine (see contention.md).
//
// A gate sees only its own process. A conflict of an attempt that ran
// alone in the gate came from elsewhere, usually another replica of the
// same service: such conflicts pace the gate (the caller pauses in its
// place, for up to 500 µs doubling while they last, at most 100 ms,
// halving on lone commits, and less as the call ages, not at all once it
// is 300 ms old), so that several processes on one hot row take turns
// instead of keeping one attempt each on it. See contention.md.
//
// A caller waits for admission before BEGIN and leaves the gate after COMMIT
// or ROLLBACK: it never waits while holding a transaction, so the gate
// cannot deadlock against the database's own locks. A nested call on a
// handle gated by the same manager does not queue again. Waiting honours the
// call's context, its deadline and its time budget. Calls whose fns wait for
// each other (a test that forces a deadlock between two calls, say) are
// admitted together after a few such stalls of the gate (20 ms each for
// quick transactions), however narrow it was.
//
// A ContentionManager is safe for concurrent use, and its zero value is
// ready to use, like NewContentionManager(0); share one among the calls
// that contend for the same data. By default each database handle (*sql.DB,
// *sql.Conn, *pgxpool.Pool, *pgx.Conn) gets its own, created on first use
// and dropped when the handle is garbage collected.
type ContentionManager struct {
	mu      sync.Mutex
	width   float64
	max     float64
	streak  int           // attempts without a conflict since the width last changed
	probing bool          // the width was last widened, and has not yet held for a streak
	from    float64       // the width before the last widening
	fails   int           // widenings in a row undone by a conflict (capped at cmMaxFails)
	failW   float64       // the width the last undone widening tried; 0: none
	rate    float64       // share of recent attempt time lost to conflicts (moving average)
	win     cmWindow      // commits at the current width, for comparing goodput
	base    float64       // commits per second at the width before a probe
	baseOK  bool          // base was measured at the current width
	debt    int           // commits to go before the streak counts again
	avg     time.Duration // moving average of committed attempts' durations
	inUse   int
	opened  bool                   // the slow start is over (see release)
	left    uint64                 // attempts that have left the gate
	epoch   uint64                 // counts width changes; an attempt's ticket records it at admission
	cut     uint64                 // the epoch the width last narrowed at: older attempts do not narrow it
	waiters []*cmWaiter            // by arrival of their calls: a retry keeps its call's place
	arrived uint64                 // calls that have asked for admission
	keys    map[string][]*cmWaiter // held keys (WithContentionKeys) and their waiters
	admits  uint64                 // attempts admitted
	pace    time.Duration          // pause after a conflict with another process; 0: none lately
	pausing int                    // callers that keep their place through such a pause
}

// cmWindow counts what happened at the current width since it was set or
// last judged.
type cmWindow struct {
	start     time.Time
	n, commit int
	conflicts int
}

// The manager's tuning, chosen with txbench (see contention.md).
const (
	// cmStreak conflict-free attempts per unit of width widen the gate.
	cmStreak = 16
	// cmMaxFails: each widening in a row that was undone doubles the
	// streak the next one needs, up to 2^cmMaxFails times.
	cmMaxFails = 6
	// cmCheap: a conflict that lasted at most this many average commits is
	// cheap, and narrows the gate at most once per generation.
	cmCheap = 4
	// cmMaxDebt caps, in commits, what one expensive conflict costs.
	cmMaxDebt = 100_000
	// cmRateWindow is the span, in average commits, of the moving average
	// of the share of attempt time lost to conflicts, at widths up to 4;
	// wider gates average over 16 x width commits. With a fixed 64 the
	// gate wandered between widths 4 and 18 on PostgreSQL's SERIALIZABLE
	// transfers among 10,000 accounts, whose conflicts come in clusters,
	// and committed 0.87-0.93x the goodput of no retry at all; held at 8
	// or 16 it committed as much.
	cmRateWindow = 64
	// cmMaxRate is that share above which a conflict halves the width. A
	// conflict below it only restarts the streak: one attempt in ten or so
	// may fail at a width that commits more than a narrower one (InnoDB
	// transfers among ten accounts commit 1.4-1.6x serial at widths 2 and
	// 3, with 8% of attempts deadlocked; at 1/12 the gate kept falling
	// back to 1 and reached 1.35x). A deadlock that cost a second weighs
	// hundreds of commits and always halves.
	cmMaxRate = 1.0 / 10
	// cmJudgeWindow attempts per unit of width judge a widening during
	// which conflicts were tolerated: it is kept only if it committed
	// cmGain more per second than the width before it.
	cmJudgeWindow = 128
	cmGain        = 0.05
	// The gate widens when it stands still, with callers queued, for
	// cmStallCommits usual commits and at least cmStall (see
	// stalledLocked). Shorter steps mistook the slow transactions of a
	// busy machine for stalls: at 4 commits and 1 ms the gate widened 3
	// times a second on PostgreSQL's hot row and ten accounts, each time
	// into a conflict (1.03-1.07 attempts per commit instead of 1.01-1.02);
	// at 32 commits and 20 ms it never did.
	cmStallCommits = 32
	cmStall        = 20 * time.Millisecond
	// A pace (see paceLocked) is at least cmMinPace, and at least the
	// average commit, and at most cmMaxPace; a call cmPacePatience old
	// no longer pauses. At 8 processes x 4 workers on one hot row, a
	// patience of 300 ms gave 0-0.1% failed calls and a p99 of 300 ms on
	// PostgreSQL, 500 ms gave 0% and 430-510 ms, none gave 0.4-1.1% and
	// 600-750 ms (contention.md).
	cmMinPace      = 500 * time.Microsecond
	cmMaxPace      = 100 * time.Millisecond
	cmPacePatience = 300 * time.Millisecond
)

type cmWaiter struct {
	ready    chan struct{}
	head     chan struct{} // closed when the waiter is the first in the gate's queue
	watching bool          // head is closed
	granted  bool
	arrival  uint64   // of the call, numbered at its first request
	admitted cmTicket // filled when granted
}

// cmTicket is a call's standing with a manager: its place in the order,
// and how its running attempt was admitted.
type cmTicket struct {
	arrival uint64    // numbered at the call's first request; 0 until then
	epoch   uint64    // the manager's epoch when the attempt was admitted
	admit   uint64    // the manager's count of admissions, this one included
	alone   bool      // no other attempt was in the gate when this one entered
	since   time.Time // when the call started, on the clock of release's now
}

// DefaultContentionWidth is the maximum width of a ContentionManager made by
// default or by NewContentionManager(0).
const DefaultContentionWidth = 64

// NewContentionManager returns a manager whose gate is at most maxWidth wide
// (0 means DefaultContentionWidth). A negative maxWidth returns an error
// matching ErrInvalidOption.
func NewContentionManager(maxWidth int) (*ContentionManager, error) {
	if maxWidth < 0 {
		return nil, fmt.Errorf("%w: NewContentionManager(%d): width must not be negative", ErrInvalidOption, maxWidth)
	}
	if maxWidth == 0 {
		maxWidth = DefaultContentionWidth
	}
	return &ContentionManager{width: 1, max: float64(maxWidth), opened: maxWidth == 1}, nil
}

// Width returns the gate's current width, for observation and tests.
func (m *ContentionManager) Width() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.width
}

// Queued returns how many callers wait for admission now.
func (m *ContentionManager) Queued() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waiters)
}

// tryAcquire admits at once if the gate has room and nobody is waiting.
func (m *ContentionManager) tryAcquire(t *cmTicket) bool {
	m.mu.Lock()
	m.arrival(&t.arrival)
	ok := m.admitLocked(t)
	m.mu.Unlock()
	return ok
}

// admitLocked admits t at once if the gate has room and nobody is waiting,
// recording the epoch it was admitted at.
func (m *ContentionManager) admitLocked(t *cmTicket) bool {
	if m.max == 0 { // the zero value: as NewContentionManager(0)
		m.width, m.max = 1, DefaultContentionWidth
	}
	if len(m.waiters) == 0 && float64(m.inUse) < m.width {
		m.enterLocked(t)
		return true
	}
	return false
}

// enterLocked takes a place in the gate for t's attempt.
func (m *ContentionManager) enterLocked(t *cmTicket) {
	t.alone = m.inUse == 0
	m.inUse++
	m.admits++
	t.epoch, t.admit = m.epoch, m.admits
}

// arrival numbers a call at its first request for admission; *n is 0 until
// then.
func (m *ContentionManager) arrival(n *uint64) {
	if *n == 0 {
		m.arrived++
		*n = m.arrived
	}
}

// acquire waits for admission in the order the calls arrived (a retry
// goes before every call that arrived after its own), or until ctx ends.
// t numbers the call and records the admission. The caller at the head of
// the queue times, on clock, the stalls that widen the gate (see
// stalledLocked).
func (m *ContentionManager) acquire(ctx context.Context, t *cmTicket, clock Clock) error {
	m.mu.Lock()
	m.arrival(&t.arrival)
	if m.admitLocked(t) {
		m.mu.Unlock()
		return nil
	}
	w := &cmWaiter{ready: make(chan struct{}), head: make(chan struct{}), arrival: t.arrival}
	i := len(m.waiters)
	for i > 0 && m.waiters[i-1].arrival > w.arrival {
		i--
	}
	m.waiters = slices.Insert(m.waiters, i, w)
	m.watchHeadLocked()
	m.mu.Unlock()
	var (
		stall  Timer
		stallC <-chan time.Time
		mark   cmMark
		head   = w.head
	)
	for {
		select {
		case <-w.ready:
			stopTimer(stall)
			t.epoch, t.admit, t.alone = w.admitted.epoch, w.admitted.admit, w.admitted.alone
			return nil
		case <-ctx.Done():
			stopTimer(stall)
			m.mu.Lock()
			if w.granted {
				// Admitted while giving up: pass the place on.
				m.inUse--
				m.grantLocked()
			} else {
				m.waiters = slices.DeleteFunc(m.waiters, func(x *cmWaiter) bool { return x == w })
				m.watchHeadLocked()
			}
			m.mu.Unlock()
			return context.Cause(ctx)
		case <-head: // at the head of the queue: watch for stalls
			head = nil
		case <-stallC:
			m.mu.Lock()
			if m.markLocked() == mark {
				m.stalledLocked(clock.Now())
			}
			granted := w.granted
			m.mu.Unlock()
			if granted {
				continue // ready is closed: the next select returns
			}
		}
		// Watch the next step from what the gate looks like now.
		m.mu.Lock()
		mark = m.markLocked()
		step := m.stallStep()
		m.mu.Unlock()
		stall = clock.NewTimer(step)
		stallC = stall.C()
	}
}

func stopTimer(t Timer) {
	if t != nil {
		t.Stop()
	}
}

// cmMark is what moves in the gate: its width, and the attempts that left.
type cmMark struct{ epoch, left uint64 }

func (m *ContentionManager) markLocked() cmMark { return cmMark{m.epoch, m.left} }

// stallStep is how long the gate may stand still, with callers queued,
// before it widens: cmStallCommits usual commits, at least cmStall.
func (m *ContentionManager) stallStep() time.Duration {
	return max(cmStallCommits*m.avg, cmStall)
}

// watchHeadLocked tells the caller at the head of the queue to watch for
// stalls; a caller that was at the head before a retry went ahead of it
// keeps watching, which does no harm, since a stall widens once per step.
func (m *ContentionManager) watchHeadLocked() {
	if len(m.waiters) > 0 && !m.waiters[0].watching {
		m.waiters[0].watching = true
		close(m.waiters[0].head)
	}
}

// stalledLocked widens a gate that stood still for a step while callers
// queued: no attempt left it and its width did not change. The attempts
// inside may be waiting for the callers outside (as in a test that forces
// a deadlock between two calls), or for something outside the database;
// either way the queue would otherwise wait until its deadlines. During
// slow start the width doubles; after it, the widening is a probe, undone
// as the other widenings are (see the type's documentation).
func (m *ContentionManager) stalledLocked(now time.Time) {
	if len(m.waiters) == 0 || m.width >= m.max || m.pausing > 0 {
		return // a pause keeps the gate still on purpose
	}
	if m.opened && !m.probing {
		m.from, m.probing = m.width, true
	}
	m.setWidth(min(2*m.width, m.max), now)
	m.opened = m.opened || m.width >= m.max
	m.grantLocked()
}

// giveBack leaves the gate without an attempt: the place passes on, and
// nothing is learnt about contention. paused says the caller kept its place
// through a pause that release returned.
func (m *ContentionManager) giveBack(paused bool) {
	m.mu.Lock()
	if paused {
		m.pausing--
	}
	m.inUse--
	m.grantLocked()
	m.mu.Unlock()
}

// release leaves the gate; conflict says the attempt failed with a
// retryable error, d is how long the attempt took, t is the attempt's
// admission, rnd (nil: none) jitters the pause. When pace is set and the
// conflict came from another process (see paceLocked), it returns a pause: the caller
// keeps its place in the gate, waits that long, and then either starts its
// next attempt through resume or gives the place back through
// giveBack(true).
func (m *ContentionManager) release(t *cmTicket, conflict bool, d time.Duration, now time.Time, pace bool, rnd func() float64) (pause time.Duration) {
	d = max(d, 0) // calls sharing a manager may use different clocks (WithClock)
	m.mu.Lock()
	if pace {
		pause = m.paceLocked(t, conflict, now, rnd)
	}
	if pause > 0 {
		m.pausing++
	} else {
		m.inUse--
	}
	m.judge(conflict, now)
	// The rate is a moving average over attempt time, not attempts: each
	// attempt weighs as many average commits as it lasted, so that it
	// estimates the share of the gate's time lost to conflicts. It spans
	// cmRateWindow commits, or 16 generations of attempts (16 x width
	// commits) at a gate wider than 4: 64 commits of a gate 16 wide pass
	// in 4 commit times, where a cluster of conflicts that one commit set
	// off would halve the width on its own.
	weight := 1.0
	if m.avg > 0 {
		weight = min(float64(d)/float64(m.avg), cmRateWindow)
	}
	x := 0.0
	if conflict {
		x = 1
	}
	m.rate += (x - m.rate) * weight / (cmRateWindow * max(1, m.width/4))
	m.left++
	slow := !m.opened
	switch {
	case conflict && !slow && (m.rate <= cmMaxRate || t.epoch < m.cut && weight <= cmCheap):
		// Tolerated: no widening for a while. A cheap conflict of an
		// attempt admitted before the width last narrowed does not narrow
		// it again: like TCP, which halves its window at most once per
		// round trip, the gate halves at most once per generation of
		// attempts, or the attempts still running at the wider width would
		// each halve it again. An expensive one (a deadlock found after
		// 1 s) still does, as TCP's timeouts do: waiting a generation per
		// halving would cost a second each.
		m.streak = 0
	case conflict:
		m.opened = true
		if m.probing {
			m.undo(now)
		} else {
			m.narrow(max(1, m.width/2), now)
		}
		if m.avg > 0 {
			m.debt = int(min(int64(m.debt)+int64(d/m.avg), cmMaxDebt))
		}
	case m.avg == 0:
		m.avg = max(d, 1)
	default:
		m.avg = max(m.avg+(d-m.avg)/16, 1)
	}
	if !conflict {
		if slow {
			// Slow start (see the type's documentation): double after a
			// generation without a conflict; the first conflict ends it
			// in the case above.
			m.streak++
			if m.streak >= int(m.width) {
				m.setWidth(min(2*m.width, m.max), now)
				m.opened = m.width >= m.max
			}
		} else if m.debt > 0 {
			m.debt--
		} else {
			m.streak++
			need := cmStreak * int(m.width)
			if m.probing && m.streak >= need && m.win.conflicts == 0 {
				m.held() // the last widening held without a conflict
			}
			// A widening also waits for a quarter window at this width,
			// whose goodput is what the wider width will be judged by.
			measured := m.win.n >= cmJudgeWindow/4*int(m.width)
			if !m.probing && m.streak >= need<<m.backoff() && m.width < m.max && (measured || m.baseOK) {
				if measured {
					m.base = m.win.rate(now)
				}
				m.from = m.width
				m.setWidth(m.next(), now)
				m.probing = true
			}
		}
	}
	m.grantLocked()
	m.mu.Unlock()
	return pause
}

// resume starts the next attempt of a caller that kept its place through
// a pause.
func (m *ContentionManager) resume(t *cmTicket) {
	m.mu.Lock()
	m.pausing--
	m.inUse--
	m.enterLocked(t)
	m.mu.Unlock()
}

// paceLocked learns from an attempt that no other attempt of this gate
// overlapped (it entered an empty gate, and none entered after it): a
// conflict there came from outside, typically from another process of the
// same service, whose own gate this one cannot see. Such a conflict doubles
// the pace (from cmMinPace, or the average commit if longer, up to
// cmMaxPace) and returns a pause of up to the pace, jittered, during which
// the caller keeps its place: the whole process steps back from the
// contended data for a while, as a backoff would, while its callers stay
// in arrival order. A lone commit halves the pace, to none below
// cmMinPace.
//
// The pause shrinks with the call's age and is gone once the call is
// cmPacePatience old: pacing alone lets the process that commits keep
// committing, since its next attempt starts while the others pause, and
// their calls would run into the deadline (the capture effect of Ethernet's
// backoff). An old call retries at once instead and takes its chance
// against the process that has the data. See contention.md.
func (m *ContentionManager) paceLocked(t *cmTicket, conflict bool, now time.Time, rnd func() float64) time.Duration {
	if !t.alone || t.admit != m.admits {
		return 0
	}
	if !conflict {
		if m.pace /= 2; m.pace < cmMinPace {
			m.pace = 0
		}
		return 0
	}
	m.pace = min(max(2*m.pace, m.avg, cmMinPace), cmMaxPace)
	p := float64(m.pace)
	if rnd != nil {
		p *= rnd()
	}
	if !t.since.IsZero() {
		p *= max(0, 1-float64(now.Sub(t.since))/float64(cmPacePatience))
	}
	return max(time.Duration(p), 1) // 1: at once, in its place
}

// undo returns to the width before the last widening, which conflicts
// pushed over the share or the judge rejected: the next widening to this
// width or beyond waits longer.
func (m *ContentionManager) undo(now time.Time) {
	m.fails = min(m.fails+1, cmMaxFails)
	m.failW = m.width
	m.probing = false
	m.narrow(m.from, now)
}

// narrow sets a narrower width and starts a generation: attempts admitted
// before it no longer narrow the gate with a cheap conflict.
func (m *ContentionManager) narrow(w float64, now time.Time) {
	m.setWidth(w, now)
	m.cut = m.epoch
}

// held records that the widening to the current width was kept: widening
// beyond the width that last failed starts afresh.
func (m *ContentionManager) held() {
	m.probing = false
	if m.width >= m.failW {
		m.fails, m.failW = 0, 0
	}
}

// next is the width a widening goes to: twice the width, or half as much
// again if conflicts were tolerated at this width.
func (m *ContentionManager) next() float64 {
	if m.win.conflicts > 0 {
		return min(m.max, math.Ceil(m.width*1.5))
	}
	return min(m.max, m.width*2)
}

// backoff is how many times the streak doubles before the next widening:
// only widenings that would reach a width that was undone back off, so that
// a failed widening from 2 to 3 does not slow the return from 1 to 2.
func (m *ContentionManager) backoff() int {
	if m.failW > 0 && m.next() >= m.failW {
		return m.fails
	}
	return 0
}

// setWidth changes the width and starts a new window and streak.
func (m *ContentionManager) setWidth(w float64, now time.Time) {
	m.width, m.streak, m.baseOK = w, 0, false
	m.win = cmWindow{start: now}
	m.epoch++
}

// judge counts the attempt in the window and, when a widening that tolerated
// conflicts has run for a full window, keeps it only if it commits at least
// cmGain more per second than the narrower width did.
func (m *ContentionManager) judge(conflict bool, now time.Time) {
	if m.win.start.IsZero() {
		m.win.start = now
	}
	m.win.n++
	if conflict {
		m.win.conflicts++
	} else {
		m.win.commit++
	}
	if m.win.n < cmJudgeWindow*int(m.width) {
		return
	}
	if m.probing && m.win.conflicts > 0 {
		if m.win.rate(now) < m.base*(1+cmGain) {
			m.undo(now)
			return
		}
		m.held()
	}
	if !m.probing {
		m.base, m.baseOK = m.win.rate(now), true
	}
	m.win = cmWindow{start: now}
}

func (w cmWindow) rate(now time.Time) float64 {
	el := now.Sub(w.start)
	if el <= 0 || w.n == 0 {
		return 0
	}
	return float64(w.commit) / el.Seconds()
}

func (m *ContentionManager) grantLocked() {
	for len(m.waiters) > 0 && float64(m.inUse) < m.width {
		w := m.waiters[0]
		m.waiters[0] = nil
		m.waiters = m.waiters[1:]
		w.granted = true
		m.enterLocked(&w.admitted)
		close(w.ready)
	}
	m.watchHeadLocked()
}

// tryLockKeys takes every key at once if none is held.
func (m *ContentionManager) tryLockKeys(keys []string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		if _, held := m.keys[k]; held {
			return false
		}
	}
	if m.keys == nil {
		m.keys = make(map[string][]*cmWaiter)
	}
	for _, k := range keys {
		m.keys[k] = nil
	}
	return true
}

// lockKeys takes the keys one at a time in their sorted order, waiting in
// each key's FIFO queue, or gives them all back when ctx ends. Since every
// caller takes its keys in the same order, no two callers wait for each
// other in a cycle.
func (m *ContentionManager) lockKeys(ctx context.Context, keys []string) error {
	for i, k := range keys {
		m.mu.Lock()
		if m.keys == nil {
			m.keys = make(map[string][]*cmWaiter)
		}
		ws, held := m.keys[k]
		if !held {
			m.keys[k] = nil
			m.mu.Unlock()
			continue
		}
		w := &cmWaiter{ready: make(chan struct{})}
		m.keys[k] = append(ws, w)
		m.mu.Unlock()
		select {
		case <-w.ready:
		case <-ctx.Done():
			m.mu.Lock()
			if w.granted {
				m.unlockKeyLocked(k)
			} else {
				m.keys[k] = slices.DeleteFunc(m.keys[k], func(x *cmWaiter) bool { return x == w })
			}
			for _, h := range keys[:i] {
				m.unlockKeyLocked(h)
			}
			m.mu.Unlock()
			return context.Cause(ctx)
		}
	}
	return nil
}

// unlockKeys gives the keys back, each to its first waiter if any.
func (m *ContentionManager) unlockKeys(keys []string) {
	m.mu.Lock()
	for _, k := range keys {
		m.unlockKeyLocked(k)
	}
	m.mu.Unlock()
}

func (m *ContentionManager) unlockKeyLocked(k string) {
	ws := m.keys[k]
	if len(ws) == 0 {
		delete(m.keys, k)
		return
	}
	w := ws[0]
	ws[0] = nil
	m.keys[k] = ws[1:]
	w.granted = true
	close(w.ready)
}

// WithContentionKeys names what the call's transaction reads and writes
// that other calls contend for (for example "account:42"), to the
// contention manager in force (by default the handle's): instead of
// passing its gate, each attempt waits until no other call holding one of
// the same keys is in its attempt, in arrival order per key, and calls with
// disjoint keys run at once. Keys are taken before BEGIN and given back
// after COMMIT or ROLLBACK, all in one sorted order, so callers never wait
// for each other in a cycle nor while holding a transaction; waiting honours
// the call's context, deadline and time budget. Keys only space attempts:
// a transaction that touches data outside its keys can still conflict, and
// is retried as usual. Unlike the gate, keys never widen: two calls that
// share a key and whose fns wait for each other wait until their deadlines.
// A nested call that joined an enclosing call's
// attempt on the same manager takes no keys; a call nested in fn on a handle
// with another manager queues there while the outer call holds its keys or
// place, so nest calls on different handles in one consistent order (or
// share one manager) lest two such calls wait for each other. With WithoutContentionManager
// the call returns an error matching ErrInvalidOption. Default: none (the
// manager's adaptive gate).
func WithContentionKeys(keys ...string) Option {
	return func(c *config) {
		k := slices.Clone(keys)
		slices.Sort(k)
		c.keys = slices.Compact(k)
	}
}

// WithContentionManager routes the call's attempts through m, typically one
// manager shared by the calls of one operation (for example per label).
// Default: a manager per database handle (see ContentionManager).
func WithContentionManager(m *ContentionManager) Option {
	return func(c *config) {
		if m == nil {
			c.fail("WithContentionManager(nil): use WithoutContentionManager to turn it off")
			return
		}
		c.cm, c.cmSet = m, true
	}
}

// WithoutContentionManager lets every attempt go straight to the database,
// relying on the backoff alone.
func WithoutContentionManager() Option {
	return func(c *config) { c.cm, c.cmSet = nil, true }
}

// managers holds the default manager of each database handle, without
// keeping the handle alive: a handle that is garbage collected takes its
// manager with it (see core.PerHandle).
var managers sync.Map

// defaultManager returns the manager of the adapter's handle, creating it on
// first use, or nil if the handle has no default manager.
func defaultManager(a core.Adapter) *ContentionManager {
	m, _ := a.PerHandle(&managers, newDefaultManager).(*ContentionManager)
	return m
}

func newDefaultManager() any {
	m, _ := NewContentionManager(0)
	return m
}
