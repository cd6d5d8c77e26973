package txretry

import (
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
// It keeps one conflict domain per kind of transaction: the calls with one
// WithLabel name, or, for calls without a label, the calls whose function
// was written at one place in the source (every closure written there,
// whatever it captures; an Adapter tells fn through AdapterFunc, and the
// calls of an adapter that does not share one domain). A domain starts
// open: its attempts go straight to the database, at the cost of an atomic
// load, and retry after the backoff. Once more than a tenth of its recent
// attempts conflict (a moving average over about 64 attempts: seven
// conflicts in a row), the domain closes a gate: its attempts queue in the
// order their calls arrived (a retry keeps its call's place, so no call
// starves), one at a time at first. The gate widens (doubles) after a
// streak of 16 x width commits, each narrowing doubling the next streak up
// to 64 times, halves on a conflict while conflicts exceed the tenth, and
// opens again once it has widened to the manager's maximum. Other domains
// do not queue behind it.
//
// A conflict of an attempt that ran alone in its gate came from another
// process, usually another replica of the service. Such conflicts pace the
// domain: the caller pauses in its place, for up to 500 µs doubling while
// they last, at most 100 ms, shrinking by a tenth on lone commits and with
// the call's age (no pause once it is 200 ms old), so that the processes
// take turns on the contended rows instead of each keeping an attempt on
// them.
//
// Where the adapter can hold a database lock (an AdapterLease: RunInTx on
// a *sql.DB with pgx's stdlib driver or go-sql-driver/mysql,
// pgxretry.RunInTx on a *pgxpool.Pool), such a conflict also makes the
// domain lease, until its gate opens: the process's admitted attempts of
// the domain run only under its lease, a database lock that the first of
// them takes on a connection of the pool's own. After 10 ms no new attempt
// starts under it, and the last one out gives it back (at once when none
// of the process's attempts of the domain is in or waiting); the next
// queues for it again. The processes thus take turns in the database's
// lock queue, a few attempts at a time. The lock is PostgreSQL's
// pg_advisory_lock, or MySQL's GET_LOCK, of a lock id hashed (FNV-1a 64)
// from the key made of a NUL byte, "domain", a NUL, the label, a NUL and
// the source location (empty with a label): replicas share a domain's
// lease when they run one build or use one label. It costs a connection
// while held, and nothing to domains without conflicts across processes.
// A lease not had within 250 ms (its holder stopped, say), a pool with no
// connection to spare for it beside the attempt's, a handle of one
// connection, or a pooler that moves sessions (PgBouncer, noticed through
// the server process the connection announced; lib/pq does not tell it,
// so it never leases) leaves the domain without a lease for 1 s, paced
// only. The lease's timing is real time, whatever WithClock says.
//
// A caller waits for admission before BEGIN and leaves after COMMIT or
// ROLLBACK: it never waits while holding a transaction. A nested call
// inside an attempt that this manager admitted does not queue again.
// Waiting honours the call's context, its deadline and its time budget. A
// gate that admits nobody for 200 ms (real time, whatever WithClock says)
// while callers queue widens by one, so that calls of one domain whose
// functions wait for each other are not held until their deadlines.
//
// Two kinds of transaction that conflict with each other (two operations
// writing one counter, say) are two domains, each gated on its own
// conflicts: give them one WithLabel to queue them together.
//
// A ContentionManager is safe for concurrent use, and its zero value is
// ready to use, like NewContentionManager(0). By default each database
// handle (*sql.DB, *sql.Conn, *pgxpool.Pool, *pgx.Conn, an Adapter's
// Handle) has its own, made on first use and dropped when the handle is
// garbage collected (see ManagerFor). The design and the measurements
// behind its constants are in contention.md.
type ContentionManager struct {
	max     int      // a gate this wide opens; 0: DefaultContentionWidth
	domains sync.Map // cmKey → *cmDomain
	count   atomic.Int32
	// lockWaitAt is when an attempt last showed lock waits worth ending
	// (see noteAttempt), in Unix nanoseconds; 0: never.
	lockWaitAt atomic.Int64
}

// DefaultContentionWidth is the width at which a gate of a manager made by
// default or by NewContentionManager(0) opens again.
const DefaultContentionWidth = 64

const (
	// cmMaxDomains bounds the domains of a manager (labels may be made at
	// run time); the calls of any further domain share one.
	cmMaxDomains = 1024
	// cmLockWait: an attempt that lasted at least this long and was then
	// lost (40001, 40P01, or its caller's context ended) would have lost
	// no more to the default lock timeout, and likely waited for a lock.
	// Arming only after a deadlock had ended failed 1.6-4.1% of
	// ten-account transfers at 4-8 processes, against 0.0-0.1%.
	cmLockWait = DefaultLockTimeout
	// cmLockMemory: the lock timeout stays armed this long after the last
	// such attempt, or the last lock timeout it set off.
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

// cmKey names a conflict domain: a label, or where fn was written.
type cmKey struct{ label, site string }

// sites caches the source location of each function's code pointer.
var sites sync.Map // uintptr → string

// domainKey is the domain of a call with label and function fn (nil: the
// adapter does not tell). A function is known by the place in the source
// where it was written, not by its code pointer: the compiler copies a
// closure into every caller it inlines the enclosing function into.
func domainKey(label string, fn any) cmKey {
	if label != "" || fn == nil {
		return cmKey{label: label}
	}
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Func || v.IsNil() {
		return cmKey{}
	}
	pc := v.Pointer()
	if s, ok := sites.Load(pc); ok {
		return cmKey{site: s.(string)}
	}
	site := fmt.Sprint(pc)
	if f := runtime.FuncForPC(pc); f != nil {
		file, line := f.FileLine(pc)
		site = fmt.Sprintf("%s:%d", file, line)
	}
	sites.Store(pc, site)
	return cmKey{site: site}
}

// domain returns the domain of k, made on first use.
func (m *ContentionManager) domain(k cmKey) *cmDomain {
	if d, ok := m.domains.Load(k); ok {
		return d.(*cmDomain)
	}
	if m.count.Load() >= cmMaxDomains {
		k = cmKey{label: "\x00overflow"}
	}
	d, loaded := m.domains.LoadOrStore(k, &cmDomain{width: 1})
	if !loaded {
		m.count.Add(1)
	}
	return d.(*cmDomain)
}

func (m *ContentionManager) maxWidth() int {
	if m.max == 0 {
		return DefaultContentionWidth
	}
	return m.max
}

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
