package txretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// TestGateLearnsNothingFromNeutralOutcomes: an attempt that neither
// committed nor conflicted (fn panicked, COMMIT's outcome is unknown, the
// idempotency key was already committed, the connection was lost) gives
// its place in its domain's gate back without counting in the width
// controller's window: it is neither a commit nor a conflict of the width
// it ran at. A commit, for contrast, does count.
func TestGateLearnsNothingFromNeutralOutcomes(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		name    string
		drv     *fakedb.Driver
		fn      func(context.Context, *sql.Tx) error
		opts    []Option
		counted int // attempt ends in the controller's window after one call
	}{
		{"commit", &fakedb.Driver{}, nil, nil, 1},
		{"panic in fn", &fakedb.Driver{}, func(context.Context, *sql.Tx) error { panic("fn's bug") }, nil, 0},
		{"uncertain commit", &fakedb.Driver{OnCommit: func(int) error { return io.ErrUnexpectedEOF }}, nil, nil, 0},
		{"key already committed", &fakedb.Driver{OnExec: func(context.Context, int, string, []driver.NamedValue) error {
			return &fakedb.SQLStateError{Code: "23505"}
		}}, nil, []Option{WithIdempotencyKey("idem_keys", "k1")}, 0},
		{"connection lost", &fakedb.Driver{OnExec: func(context.Context, int, string, []driver.NamedValue) error { return reset }},
			nil, []Option{WithRetryOnConnectionLoss(), WithMaxAttempts(1)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := new(ContentionManager)
			d := m.domain(domainKey("k", nil))
			d.width = 1 // closed, one place
			db := tc.drv.DB()
			defer db.Close()
			fn := tc.fn
			if fn == nil {
				fn = func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, "UPDATE t SET v = v + 1")
					return err
				}
			}
			func() {
				defer func() { _ = recover() }()
				_ = RunInTx(context.Background(), db, fn, append([]Option{WithContentionManager(m), WithLabel("k")}, tc.opts...)...)
			}()
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.ctl.n != tc.counted || d.ctl.conflicts != 0 || d.width != 1 {
				t.Errorf("window: %d ends, %d conflicts, width %d; want %d ends, 0 conflicts, width 1", d.ctl.n, d.ctl.conflicts, d.width, tc.counted)
			}
			if d.inUse != 0 || len(d.queue) != 0 {
				t.Errorf("%d places in use, %d queued; want the place given back", d.inUse, len(d.queue))
			}
		})
	}
}
