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
	"github.com/txretry/txretry/txretry/internal/funcname"
)

// ContentionManager spaces out the attempts of the transactions that
// conflict with each other, and leaves every other transaction alone. It
// keeps a conflict domain per WithConflictDomain or WithLabel name, else
// per function fn (see domainKey). In an open domain first attempts go
// straight in; each conflict doubles the domain's spacing (1 ms to 1 s),
// which a retry waits, and a call's third attempt runs alone in its domain.
// A conflict that doubles the spacing past half its call's time closes a
// FIFO gate whose width then follows the domain's commits per second; a
// conflict that no gated attempt of the manager overlapped came from
// another process: the gate then stays at width 1 and, through an
// AdapterLease, the processes take turns on the domain under a database
// lock (with AdapterOverlapCommit, the next attempt of a turn begins once
// the last has sent COMMIT). Its zero value is NewContentionManager(0);
// it is safe for concurrent use; by default each database handle has its
// own (see ManagerFor). The design and its constants: contention.md.
type ContentionManager struct {
	max        int      // a gate this wide opens; 0: DefaultContentionWidth
	domains    sync.Map // domainKey → *cmDomain
	count      atomic.Int32
	lockWaitAt atomic.Int64  // Unix ns of the last lock wait worth ending (noteAttempt)
	running    atomic.Int32  // attempts admitted through a gate and in, in every domain
	starts     atomic.Uint64 // attempts admitted through a gate
	stall      time.Duration // a gate that admits nobody this long widens by one; 0: cmStall (tests set it)
}

// DefaultContentionWidth is the width at which a default manager's gates open.
const DefaultContentionWidth = 64

const (
	cmMaxDomains = 1024               // per manager; the calls of any further domain share one
	cmLockWait   = DefaultLockTimeout // a lost attempt this long arms the lock timeout...
	cmLockMemory = time.Minute        // ...for this long
)

// NewContentionManager returns a manager whose gates open at maxWidth
// (0: DefaultContentionWidth); a negative one is an ErrInvalidOption.
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
		defer d.mu.Unlock()
		n += len(d.queue)
		return true
	})
	return n
}

// domainKey names the domain of a call whose domain name
// (WithConflictDomain, else WithLabel) is name, with function fn (nil: the
// adapter does not tell): "label:" and the name, or fn's name, the same in
// every build of the code wherever it was built, since replicas share a
// domain's lease through a database lock named by it (see funcname.Of: a
// function's or method's import path and name, a closure's file and line).
func domainKey(name string, fn any) string {
	if name != "" {
		return "label:" + name
	}
	if n := funcname.Of(fn); n != "" {
		return n
	}
	return "label:"
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

// noteAttempt arms the default lock timeout after an attempt of cmLockWait
// lost to 40001, 40P01 or its context (cut), or ended by the timeout.
func (m *ContentionManager) noteAttempt(err error, cut bool, d time.Duration, lockTimedOut bool, now time.Time) {
	if lockTimedOut || d >= cmLockWait && (cut || pgerr.IsRetryable(err)) {
		m.lockWaitAt.Store(now.UnixNano())
	}
}

// lockTimeoutArmed: an attempt beginning now gets the default lock timeout.
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

// managers: the default manager of each handle, by weak pointer, deleted
// when the handle is collected.
var managers sync.Map // weak.Pointer[byte] → *ContentionManager

// ManagerFor returns the default ContentionManager of a database handle
// (*sql.DB, *sql.Conn, *pgxpool.Pool, *pgx.Conn, an Adapter's Handle), made
// on first use, unless an option chooses another; nil for a handle that is
// not a non-nil pointer to a non-empty value. It does not keep handles alive.
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
