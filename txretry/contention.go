package txretry

import (
	"cmp"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/txretry/txretry/pgerr"
)

// ContentionManager spaces out the attempts of the transactions that
// conflict with each other, and leaves every other transaction alone.
//
// It keeps one conflict domain per WithLabel name or, without a label, per
// place in the source where fn was written (told by AdapterFunc). An open
// domain's attempts go straight to the database. Its first conflict closes
// a FIFO gate as wide as the most attempts it has had in at once: its
// attempts queue in the order their calls arrived, a retry keeping its
// call's place. The gate's width then follows the domain's goodput
// (commits per second), measured width against width, and the gate opens
// again once nobody queues and few attempts conflict, or at the manager's
// width. A caller waits before BEGIN, never while it holds a transaction,
// and a nested call does not queue again.
//
// A conflict of an attempt that no other attempt of the manager
// overlapped came from another process: the caller pauses in its place
// (up to 100 ms), and where the adapter is an AdapterLease the domain's
// attempts run in turns under a database lock (pg_advisory_xact_lock or
// GET_LOCK, named by a hash of the domain, in a transaction of its own)
// until its gate opens. A pool with no connection to spare leaves it paced
// only.
//
// Waiting honours the call's context and time budget; the gate's stall,
// pace and lease run on real time, its goodput on the calls' clock.
//
// A ContentionManager is safe for concurrent use, and its zero value is
// ready to use, like NewContentionManager(0). By default each database
// handle has its own (see ManagerFor). The design, and the reasons for its
// constants, are in contention.md.
type ContentionManager struct {
	max     int      // a gate this wide opens; 0: DefaultContentionWidth
	domains sync.Map // domainKey → *cmDomain
	count   atomic.Int32
	// when an attempt last showed lock waits worth ending (noteAttempt)
	lockWaitAt atomic.Int64 // Unix nanoseconds; 0: never
	running    atomic.Int32 // attempts admitted through a gate and in, in every domain
	starts     atomic.Uint64
}

// DefaultContentionWidth is the width at which a gate of a manager made by
// default or by NewContentionManager(0) opens again.
const DefaultContentionWidth = 64

const (
	// cmMaxDomains bounds the domains of a manager (labels may be made at
	// run time); the calls of any further domain share one.
	cmMaxDomains = 1024
	// An attempt of cmLockWait or more that was lost (40001, 40P01, its
	// context) arms the default lock timeout for cmLockMemory (see
	// contention.md, "Deadlocks on PostgreSQL").
	cmLockWait   = DefaultLockTimeout
	cmLockMemory = time.Minute
)

// NewContentionManager returns a manager whose gates open again once they
// have widened to maxWidth attempts at once (0 means
// DefaultContentionWidth). A negative maxWidth returns an error matching
// ErrInvalidOption.
func NewContentionManager(maxWidth int) (*ContentionManager, error) {
	if maxWidth < 0 {
		return nil, fmt.Errorf("%w: NewContentionManager(%d): width must not be negative", ErrInvalidOption, maxWidth)
	}
	return &ContentionManager{max: maxWidth}, nil
}

// Queued returns how many callers wait for admission now, in every domain.
func (m *ContentionManager) Queued() int {
	n := 0
	m.domains.Range(func(_, v any) bool {
		d := v.(*cmDomain)
		d.mu.Lock()
		n += len(d.queue)
		d.mu.Unlock()
		return true
	})
	return n
}

// domainKey names the domain of a call with label and function fn (nil:
// the adapter does not tell): "label:" and the label, or the place in the
// source where fn was written, not its code pointer: the compiler copies a
// closure into every caller it inlines the enclosing function into.
func domainKey(label string, fn any) string {
	v := reflect.ValueOf(fn)
	if label != "" || v.Kind() != reflect.Func || v.IsNil() {
		return "label:" + label
	}
	pc := v.Pointer()
	f := runtime.FuncForPC(pc)
	if f == nil {
		return fmt.Sprint("pc:", pc)
	}
	file, line := f.FileLine(pc)
	return fmt.Sprintf("%s:%d", file, line) // about 0.3 µs
}

// domain returns the domain of k, made on first use.
func (m *ContentionManager) domain(k string) *cmDomain {
	if d, ok := m.domains.Load(k); ok {
		return d.(*cmDomain)
	}
	if m.count.Load() >= cmMaxDomains {
		k = "\x00overflow"
	}
	d, loaded := m.domains.LoadOrStore(k, new(cmDomain))
	if !loaded {
		m.count.Add(1)
	}
	return d.(*cmDomain)
}

func (m *ContentionManager) maxWidth() int { return cmp.Or(m.max, DefaultContentionWidth) }

// noteAttempt arms the default lock timeout after an attempt that shows
// lock waits worth ending: one that lasted cmLockWait and then failed
// with a serialization failure or a deadlock, or was ended by its
// caller's context (cut is true), or one that the armed timeout ended.
func (m *ContentionManager) noteAttempt(err error, cut bool, d time.Duration, lockTimedOut bool, now time.Time) {
	if lockTimedOut || d >= cmLockWait && (cut || pgerr.IsRetryable(err)) {
		m.lockWaitAt.Store(now.UnixNano())
	}
}

// lockTimeoutArmed reports whether an attempt beginning now gets the
// default lock timeout: the manager saw lock waits worth ending within
// cmLockMemory.
func (m *ContentionManager) lockTimeoutArmed(now time.Time) bool {
	at := m.lockWaitAt.Load()
	return at != 0 && now.Sub(time.Unix(0, at)) < cmLockMemory
}

// WithContentionManager routes the call's attempts through m, for example
// one manager shared by the handles of one database. Default: a manager
// per database handle (see ContentionManager).
func WithContentionManager(m *ContentionManager) Option {
	return func(c *config) {
		if m == nil {
			c.fail("WithContentionManager(nil): use WithoutContentionManager to turn it off")
			return
		}
		c.cm, c.noCM = m, false
	}
}

// WithoutContentionManager lets every attempt go straight to the database,
// relying on the backoff alone. Default: off (the handle's manager).
func WithoutContentionManager() Option {
	return func(c *config) { c.cm, c.noCM = nil, true }
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
	m := new(ContentionManager)
	if old, loaded := managers.LoadOrStore(key, m); loaded {
		return old.(*ContentionManager)
	}
	runtime.AddCleanup(p, func(key weak.Pointer[byte]) { managers.Delete(key) }, key)
	return m
}
