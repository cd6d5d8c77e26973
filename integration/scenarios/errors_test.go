package scenarios

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// TestUniqueViolation: a permanent error (23505 / 1062) is returned at once
// and unchanged, as the driver's own error type, after a single run of fn.
func TestUniqueViolation(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, itemsDDL, "INSERT INTO items (id) VALUES (1)")
		var (
			runs  int
			fnErr error
		)
		err := p.run(ctx, func(ctx context.Context, q querier) error {
			runs++
			fnErr = q.exec(ctx, "INSERT INTO items (id) VALUES ($1)", 1)
			return fnErr
		})
		if err == nil || err != fnErr {
			t.Fatalf("RunInTx = %v; want fn's error %v unchanged", err, fnErr)
		}
		if code := p.d.codeOf(err); code != p.d.unique {
			t.Errorf("code = %q, want %s as the driver's error type", code, p.d.unique)
		}
		if runs != 1 {
			t.Errorf("fn ran %d times, want 1", runs)
		}
	})
}

// TestCancelDuringBackoff: fn always fails with a retryable error raised by
// the server and the backoff is 10 s; the caller cancels shortly after the
// first attempt. RunInTx returns well before the backoff ends, with an error
// matching both context.Canceled and the database's error, and not
// ErrRetriesExhausted.
func TestCancelDuringBackoff(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx, cancel := context.WithCancel(testContext(t))
		defer cancel()
		var runs atomic.Int32
		start := time.Now()
		err := p.run(ctx, func(ctx context.Context, q querier) error {
			runs.Add(1)
			err := q.exec(ctx, p.d.raiseRetryable)
			time.AfterFunc(50*time.Millisecond, cancel)
			return err
		}, txretry.WithBackoff(txretry.Constant(10*time.Second)))
		elapsed := time.Since(start)

		if !errors.Is(err, context.Canceled) {
			t.Errorf("RunInTx = %v; want context.Canceled", err)
		}
		if code := p.d.codeOf(err); code != p.d.raisedCode {
			t.Errorf("code = %q; want the database's %s in the error", code, p.d.raisedCode)
		}
		if errors.Is(err, txretry.ErrRetriesExhausted) {
			t.Errorf("RunInTx = %v; must not match ErrRetriesExhausted", err)
		}
		if elapsed > 2*time.Second {
			t.Errorf("RunInTx returned after %v; want promptly after the cancellation", elapsed)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("fn ran %d times, want 1", n)
		}
	})
}

// TestCancelWhileWaitingForAConnection: every pooled connection is held by
// a running transaction, and the caller cancels 50 ms into the wait. The
// transaction is begun on a context without the caller's cancellation (so
// that COMMIT is not cut short), yet the wait for a connection ends with the
// caller: RunInTx returns context.Canceled promptly, fn never runs, and once
// the holders finish no connection stays in use.
func TestCancelWhileWaitingForAConnection(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		release := make(chan struct{})
		var releaseOnce sync.Once
		releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
		// If the wait ignored the cancellation, the holders still finish
		// after 5 s, so that the test fails on the elapsed time instead of
		// hanging.
		safety := time.AfterFunc(5*time.Second, releaseAll)
		defer safety.Stop()
		var began sync.WaitGroup
		began.Add(maxConns)
		holders := make(chan error, maxConns)
		for range maxConns {
			go func() {
				holders <- p.run(ctx, func(ctx context.Context, q querier) error {
					began.Done()
					<-release
					return q.exec(ctx, "SELECT 1")
				}, txretry.WithoutContentionManager())
			}()
		}
		began.Wait()

		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		time.AfterFunc(50*time.Millisecond, cancel)
		var runs atomic.Int32
		start := time.Now()
		err := p.run(cctx, func(context.Context, querier) error {
			runs.Add(1)
			return nil
		}, txretry.WithoutContentionManager())
		elapsed := time.Since(start)
		releaseAll()
		for range maxConns {
			if herr := <-holders; herr != nil {
				t.Errorf("a transaction holding a connection: %v", herr)
			}
		}

		if !errors.Is(err, context.Canceled) {
			t.Errorf("RunInTx = %v; want context.Canceled", err)
		}
		if elapsed > 2*time.Second {
			t.Errorf("RunInTx returned after %v; want promptly after the cancellation", elapsed)
		}
		if n := runs.Load(); n != 0 {
			t.Errorf("fn ran %d times, want none", n)
		}
	})
}

// panicValue is what fn panics with; RunInTx must re-panic with the same.
type panicValue struct{ reason string }

// TestPanicInFn: fn writes a row and panics. RunInTx rolls back (the row is
// absent), re-panics with the original value, reports the Panicked outcome,
// and gives the connection back to the pool.
func TestPanicInFn(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, itemsDDL)
		want := &panicValue{reason: "boom"}
		var ev events
		var got any
		func() {
			defer func() { got = recover() }()
			_ = p.run(ctx, func(ctx context.Context, q querier) error {
				if err := q.exec(ctx, "INSERT INTO items (id) VALUES ($1)", 6); err != nil {
					return err
				}
				panic(want)
			}, ev.option())
		}()
		if got != want {
			t.Fatalf("recovered %v, want the original panic value %v", got, want)
		}
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM items"); n != 0 {
			t.Errorf("%d rows after the panic, want 0 (rolled back)", n)
		}
		if fin := ev.of(txretry.CallFinished); len(fin) != 1 || fin[0].Outcome != txretry.Panicked {
			t.Errorf("CallFinished events = %+v, want one with outcome Panicked", fin)
		}
		requireIdle(t, p)
	})
}

// TestRetriesExhausted: fn always fails with a retryable error; with three
// attempts allowed RunInTx gives up with ErrRetriesExhausted, a
// *RetryError saying 3 attempts, the driver's error inside, and fn ran three
// times.
func TestRetriesExhausted(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		var runs int
		err := p.run(ctx, func(ctx context.Context, q querier) error {
			runs++
			return q.exec(ctx, p.d.raiseRetryable)
		}, txretry.WithMaxAttempts(3), txretry.WithBackoff(txretry.Constant(time.Millisecond)))

		if !errors.Is(err, txretry.ErrRetriesExhausted) {
			t.Fatalf("RunInTx = %v; want ErrRetriesExhausted", err)
		}
		re, ok := errors.AsType[*txretry.RetryError](err)
		if !ok || re.Attempts != 3 {
			t.Errorf("RetryError = %+v; want Attempts 3", re)
		}
		if code := p.d.codeOf(err); code != p.d.raisedCode {
			t.Errorf("code = %q; want the driver's error with %s", code, p.d.raisedCode)
		}
		if runs != 3 {
			t.Errorf("fn ran %d times, want 3", runs)
		}
	})
}
