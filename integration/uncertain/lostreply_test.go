package uncertain

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"
	"time"

	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/txretry"
)

// TestLostCommitReplyIsNeverAppliedTwice: the server commits, the reply to
// COMMIT is lost (DropAfterCommit). Whatever the driver reports, the call
// is uncertain, never "not committed": with the defaults and with
// WithRetryOnConnectionLoss it returns ErrCommitUncertain after one run of
// fn and one row; with a verifier as well, nil and one row. lib/pq reports
// this loss as driver.ErrBadConn (io.EOF in the reply), which the library
// once took for "nothing was sent": the call returned that error with the
// row committed, and with WithRetryOnConnectionLoss it ran fn again and
// committed two rows.
func TestLostCommitReplyIsNeverAppliedTwice(t *testing.T) {
	noLeaks(t)
	for _, p := range paths(t) {
		t.Run(p.name, func(t *testing.T) {
			for _, tc := range []struct {
				name     string
				opts     func(id string) []txretry.Option
				verified bool
			}{
				{"defaults", func(string) []txretry.Option { return nil }, false},
				{"connection loss", func(string) []txretry.Option {
					return []txretry.Option{txretry.WithRetryOnConnectionLoss()}
				}, false},
				{"connection loss/callback", func(id string) []txretry.Option {
					return []txretry.Option{txretry.WithRetryOnConnectionLoss(), txretry.WithVerify(p.lookup(id))}
				}, true},
				{"connection loss/" + autoMode(p).name, func(id string) []txretry.Option {
					return append([]txretry.Option{txretry.WithRetryOnConnectionLoss()}, autoMode(p).opts(p, id)...)
				}, true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					id := "lost-reply-" + p.name + "-" + tc.name
					var runs int32
					p.proxy.Arm(faultproxy.DropAfterCommit)
					opts := append([]txretry.Option{txretry.WithCommitTimeout(commitTimeout), txretry.WithVerifyTimeout(20 * time.Second)}, tc.opts(id)...)
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					err := p.run(ctx, p.insert(id, &runs), opts...)
					cancel()
					if p.proxy.Stats().Faults[faultproxy.DropAfterCommit] == 0 {
						t.Fatal("the proxy dropped no reply to COMMIT")
					}
					if n := p.count(t, id); n != 1 || runs != 1 {
						t.Fatalf("err = %v; fn ran %d times and %d rows are committed, want 1 and 1", err, runs, n)
					}
					switch {
					case tc.verified && err != nil:
						t.Fatalf("err = %v, want the verifier to find the commit", err)
					case !tc.verified && !errors.Is(err, txretry.ErrCommitUncertain):
						t.Fatalf("err = %v, want ErrCommitUncertain", err)
					case !tc.verified && p.name == "pq" && !errors.Is(err, driver.ErrBadConn):
						t.Fatalf("err = %v, want lib/pq's driver.ErrBadConn inside", err)
					}
					p.noneInUse(t)
				})
			}
		})
	}
}
