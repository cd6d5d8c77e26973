package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// recorder keeps events as compact strings: kind, attempt and the fields
// that matter for the kind.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) Observe(_ context.Context, e txretry.Event) {
	var s string
	switch e.Kind {
	case txretry.AttemptStarted:
		s = fmt.Sprintf("started %d", e.Attempt)
	case txretry.AttemptFailed:
		s = fmt.Sprintf("failed %d %s %s %s", e.Attempt, e.Class, e.Code, e.ErrType)
	case txretry.RetryScheduled:
		s = fmt.Sprintf("retry %d %v", e.Attempt, e.Delay)
	case txretry.CommitVerified:
		s = fmt.Sprintf("verified %s %s", e.Verifier, e.Verification)
	case txretry.CallFinished:
		s = fmt.Sprintf("finished %s %d waited %v", e.Outcome, e.Attempts, e.Waited)
	}
	if e.Label != "op" {
		s += " (label " + e.Label + ")"
	}
	l.mu.Lock()
	l.events = append(l.events, s)
	l.mu.Unlock()
}

func (l *eventLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.events, "\n")
}

func TestObserverEventSequences(t *testing.T) {
	lost := io.ErrUnexpectedEOF
	commitLostOnce := func(n int) error {
		if n == 1 {
			return lost
		}
		return nil
	}
	for _, tc := range []struct {
		name   string
		drv    *fakedb.Driver
		opts   []txretry.Option
		cancel bool
		want   []string
	}{
		{"first-try success", &fakedb.Driver{}, nil, false, []string{
			"started 1", "finished committed 1 waited 0s"}},
		{"retry then success", &fakedb.Driver{OnExec: failFirst(1, errSerialization)}, nil, false, []string{
			"started 1", "failed 1 retryable 40001 fakedb.SQLStateError", "retry 1 1ms",
			"started 2", "finished committed 2 waited 1ms"}},
		{"exhaustion", &fakedb.Driver{OnExec: failFirst(9, errMySQLDeadlock)}, []txretry.Option{txretry.WithMaxAttempts(2)}, false, []string{
			"started 1", "failed 1 retryable 1213 mysql.MySQLError", "retry 1 1ms",
			"started 2", "failed 2 retryable 1213 mysql.MySQLError", "finished exhausted 2 waited 1ms"}},
		{"permanent error", &fakedb.Driver{OnExec: failFirst(1, errUnique)}, nil, false, []string{
			"started 1", "failed 1 permanent 23505 fakedb.SQLStateError", "finished permanent_error 1 waited 0s"}},
		{"uncertain, no verifier", &fakedb.Driver{OnCommit: commitLostOnce}, nil, false, []string{
			"started 1", "failed 1 uncertain  errors.errorString", "finished uncertain 1 waited 0s"}},
		{"uncertain, verified committed", &fakedb.Driver{OnCommit: commitLostOnce},
			[]txretry.Option{txretry.WithVerify(func(context.Context) (bool, error) { return true, nil })}, false, []string{
				"started 1", "failed 1 uncertain  errors.errorString", "verified callback committed", "finished committed 1 waited 0s"}},
		{"uncertain, verified not committed", &fakedb.Driver{OnCommit: commitLostOnce},
			[]txretry.Option{txretry.WithVerify(func(context.Context) (bool, error) { return false, nil })}, false, []string{
				"started 1", "failed 1 uncertain  errors.errorString", "verified callback not_committed", "retry 1 1ms",
				"started 2", "finished committed 2 waited 1ms"}},
		{"uncertain, unresolved", &fakedb.Driver{OnCommit: commitLostOnce},
			[]txretry.Option{txretry.WithVerifyTimeout(time.Millisecond),
				txretry.WithVerify(func(ctx context.Context) (bool, error) { <-ctx.Done(); return false, ctx.Err() })}, false, []string{
				"started 1", "failed 1 uncertain  errors.errorString", "verified callback unresolved", "finished uncertain 1 waited 0s"}},
		{"cancellation during the wait", &fakedb.Driver{OnExec: failFirst(9, errSerialization)}, nil, true, []string{
			"started 1", "failed 1 retryable 40001 fakedb.SQLStateError", "retry 1 1ms", "finished cancelled 1 waited 0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.drv)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				f.clock.Block = true
				go func() { <-f.clock.Blocking(); cancel() }()
			}
			log := &eventLog{}
			var calls atomic.Int32
			_ = txretry.RunInTx(ctx, f.db, execFn(&calls), f.opts(append([]txretry.Option{txretry.WithObserver(log), txretry.WithLabel("op")}, tc.opts...)...)...)
			if got, want := log.String(), strings.Join(tc.want, "\n"); got != want {
				t.Fatalf("events:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestObserverPanicEvent(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	log := &eventLog{}
	func() {
		defer func() { _ = recover() }()
		_ = txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { panic("boom") },
			f.opts(txretry.WithObserver(log), txretry.WithLabel("op"))...)
	}()
	if got, want := log.String(), "started 1\nfinished panicked 1 waited 0s"; got != want {
		t.Fatalf("events:\n%s\nwant:\n%s", got, want)
	}
}

type startKey struct{}

// spanObserver stands for a tracing adapter: it marks the call's context.
type spanObserver struct {
	eventLog
	seen atomic.Int32 // events observed with the marked context
}

func (s *spanObserver) StartCall(ctx context.Context, label string) context.Context {
	return context.WithValue(ctx, startKey{}, label)
}

func (s *spanObserver) Observe(ctx context.Context, e txretry.Event) {
	if ctx.Value(startKey{}) == "op" {
		s.seen.Add(1)
	}
	s.eventLog.Observe(ctx, e)
}

func TestSeveralObserversAndCallStarter(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{OnExec: failFirst(1, errSerialization)})
	first, second := &eventLog{}, &spanObserver{}
	var fnSawSpan bool
	err := txretry.RunInTx(context.Background(), f.db, func(ctx context.Context, tx *sql.Tx) error {
		fnSawSpan = ctx.Value(startKey{}) == "op"
		_, err := tx.ExecContext(ctx, "UPDATE")
		return err
	}, f.opts(txretry.WithObserver(first), txretry.WithObserver(second), txretry.WithLabel("op"))...)
	if err != nil {
		t.Fatal(err)
	}
	if first.String() != second.eventLog.String() || len(first.events) != 5 {
		t.Fatalf("observers saw\n%s\nand\n%s\nwant the same 5 events", first, second.eventLog.String())
	}
	if int(second.seen.Load()) != 5 || !fnSawSpan {
		t.Fatalf("%d events with the call's context, fn saw it: %v; want 5 and true", second.seen.Load(), fnSawSpan)
	}
}

func TestQueuedTimeIsReported(t *testing.T) {
	m := closedManager(t, "hot")
	f := newFixture(t, &fakedb.Driver{})
	release := make(chan struct{})
	_, holderDone := gateHolder(t, f.db, m, release)
	var queued atomic.Int64
	obs := txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
		if e.Kind == txretry.CallFinished {
			queued.Store(int64(e.Queued))
		}
	})
	done := make(chan error, 1)
	go func() {
		done <- txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { return nil },
			txretry.WithContentionManager(m), txretry.WithLabel("hot"), txretry.WithObserver(obs))
	}()
	waitQueued(t, m, 1)
	time.Sleep(20 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-holderDone
	if time.Duration(queued.Load()) < 20*time.Millisecond {
		t.Fatalf("queued %v, want at least the 20ms spent behind the holder", time.Duration(queued.Load()))
	}
}

// durationLog keeps the durations that events report.
type durationLog struct {
	mu       sync.Mutex
	attempts []time.Duration // AttemptFailed
	call     time.Duration   // CallFinished
}

func (l *durationLog) Observe(_ context.Context, e txretry.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.Kind {
	case txretry.AttemptFailed:
		l.attempts = append(l.attempts, e.Duration)
	case txretry.CallFinished:
		l.call = e.Duration
	}
}

// TestObservedDurationsAreTheAttempts: an AttemptFailed event carries how
// long its attempt took, and CallFinished the whole call, waits included,
// as measured on the configured clock.
func TestObservedDurationsAreTheAttempts(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	f.drv.OnExec = func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
		f.clock.Advance(time.Duration(n) * time.Millisecond) // attempt n runs n ms
		if n <= 2 {
			return errSerialization
		}
		return nil
	}
	var log durationLog
	var calls atomic.Int32
	if err := txretry.RunInTx(context.Background(), f.db, execFn(&calls), f.opts(txretry.WithObserver(&log))...); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if want := []time.Duration{time.Millisecond, 2 * time.Millisecond}; !slices.Equal(log.attempts, want) {
		t.Fatalf("failed attempts took %v, want %v", log.attempts, want)
	}
	var waited time.Duration
	for _, w := range f.clock.Waits() {
		waited += w
	}
	if want := 6*time.Millisecond + waited; log.call != want {
		t.Fatalf("call took %v, want the three attempts' 6ms and the waits' %v", log.call, waited)
	}
}
