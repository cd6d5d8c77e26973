package txretry

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"weak"
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
// So on a single hot row of PostgreSQL the gate stays at 1; where
// overlapping transactions mostly wait for each other's locks instead of
// failing (InnoDB) it stays wider if that commits more; while conflicts are
// rare it is wider than the number of callers and costs one uncontended
// mutex. The measurements behind these rules are in contention.md.
//
// A gate sees only its own process. A conflict of an attempt that ran
// alone in the gate came from elsewhere, usually another replica of the
// same service: such conflicts pace the gate (the caller pauses in its
// place, for up to 500 µs doubling while they last, at most 100 ms,
// shrinking by a tenth on lone commits, and less as the call ages, not at
// all once it is 200 ms old), so that several processes on one hot row
// take turns instead of keeping one attempt each on it. See contention.md.
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
// *sql.Conn, *pgxpool.Pool, *pgx.Conn, an Adapter's Handle) gets its own,
// created on first use and dropped when the handle is garbage collected
// (see ManagerFor).
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
	// lockWaitAt is when an attempt last showed lock waits worth ending
	// (see noteAttempt), in Unix nanoseconds; 0: never.
	lockWaitAt atomic.Int64
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
	// no longer pauses. At 2-8 processes on one hot row, a patience of
	// 200 ms gave no failed calls and a p99 of 210-220 ms on PostgreSQL,
	// 300 ms gave 300-310 ms, none gave 0.4-1.1% failed and 600-750 ms;
	// 150 ms cost goodput at 8 processes (contention.md).
	cmMinPace      = 500 * time.Microsecond
	cmMaxPace      = 100 * time.Millisecond
	cmPacePatience = 200 * time.Millisecond
	// A lone commit keeps cmPaceDecay of the pace. Doubling on a lone
	// conflict and halving on a lone commit settles where half the lone
	// attempts conflict; keeping 0.9 settles near an eighth. At 8
	// processes x 4 workers 0.8 committed 7-30% more than halving, and 0.9
	// another 7-14% more than 0.8, with fewer attempts per commit on both
	// hot rows and both transfers and no worse a p99 there (contention.md).
	cmPaceDecay = 0.9
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

// WithContentionKeys names what the call's transaction reads and writes
// that other calls contend for (for example "account:42"), to the
// contention manager in force (by default the handle's; a pointer handle
// without a default manager, such as a DB other than *sql.DB and *sql.Conn,
// gets ManagerFor(handle) for its keys, and any other handle makes the call
// return an error matching ErrInvalidOption): instead of
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

// managers holds the default manager of each database handle, keyed by a
// weak pointer to the handle so that the map does not keep it alive; the
// handle's cleanup deletes its entry once it is garbage collected.
var managers sync.Map // weak.Pointer[byte] → *ContentionManager

// ManagerFor returns the default ContentionManager of a database handle,
// made on first use with NewContentionManager(0): the manager that RunInTx
// and pgxretry.RunInTx use for a *sql.DB, *sql.Conn, *pgxpool.Pool or
// *pgx.Conn, and Run for an Adapter's Handle, unless an option chooses
// another. It is nil for a handle that is not a non-nil pointer to a
// non-empty value. The map of managers does not keep handles alive.
func ManagerFor(handle any) *ContentionManager {
	v := reflect.ValueOf(handle)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Type().Elem().Size() == 0 {
		return nil
	}
	p := (*byte)(v.UnsafePointer()) // the handle's address; weak.Make needs a static type
	key := weak.Make(p)
	if m, ok := managers.Load(key); ok {
		return m.(*ContentionManager)
	}
	m, _ := NewContentionManager(0)
	if old, loaded := managers.LoadOrStore(key, m); loaded {
		return old.(*ContentionManager)
	}
	runtime.AddCleanup(p, func(key weak.Pointer[byte]) { managers.Delete(key) }, key)
	return m
}
