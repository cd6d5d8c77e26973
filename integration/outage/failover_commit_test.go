//go:build unix

package outage

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/txretry"
)

// TestFailoverDuringCommit loses a COMMIT across a failover, for certain:
// the primary commits (its synchronous standby has the commit) but the
// fault proxy in front of it holds the reply; the primary is then killed
// and the standby promoted, and only then does the call's COMMIT time out,
// so its verifier asks the promoted standby, reached through the
// multi-host DSN.
//
//   - commit-marker: the marker was replicated with the commit, so the call
//     is verified committed and returns nil, applied once;
//   - xact-status: the standby is on a new timeline, where the transaction
//     id may name another transaction: the call returns ErrCommitUncertain
//     naming the timeline, and its transfer is applied (never re-run).
func TestFailoverDuringCommit(t *testing.T) {
	for _, tt := range []struct {
		name      string
		verify    txretry.Option
		uncertain bool
	}{
		{"commit-marker", txretry.WithCommitMarker(markerTable), false},
		{"xact-status", txretry.WithXactStatusVerification(), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			primary, standby := primaryWithStandby(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			proxy := faultproxy.StartPartition(t, "127.0.0.1:"+strconv.Itoa(primary.Port()), faultproxy.Postgres)
			p := pgxPool(t, multiHost(proxy.Addr(), standby))
			if proxy.Stats().Commits != 0 {
				t.Fatal("the setup committed through the proxy")
			}

			proxy.Arm(faultproxy.StallReply)
			t0 := time.Now()
			done := make(chan error, 1)
			var runs int
			go func() {
				done <- p.run(ctx, func(ctx context.Context, exec execer) error {
					runs++
					return transferTx(dbserver.Postgres, 1, transfer{from: 1, to: 2, amount: 5})(ctx, exec)
				}, tt.verify, txretry.WithRetryOnConnectionLoss(), txretry.WithCommitTimeout(5*time.Second),
					txretry.WithIsolation(sql.LevelSerializable))
			}()
			// The standby shows the transfer once the primary committed it
			// (its reply held by the proxy).
			onStandby := openDB(t, dbserver.Postgres, pgDSN(standby))
			applied := func() int {
				var n int
				if err := onStandby.QueryRowContext(ctx, "SELECT COUNT(*) FROM ledger WHERE call_id = 1").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			for applied() == 0 {
				time.Sleep(10 * time.Millisecond)
			}
			if err := primary.Kill(); err != nil {
				t.Fatalf("kill primary: %v", err)
			}
			if err := standby.Promote(ctx); err != nil {
				t.Fatalf("promote standby: %v", err)
			}
			promoted := time.Since(t0)
			err := <-done
			t.Logf("%s: promoted %v after the call began, which returned %v later: %v", tt.name,
				promoted.Round(time.Millisecond), (time.Since(t0) - promoted).Round(time.Millisecond), err)

			var ue *txretry.CommitUncertainError
			switch {
			case runs != 1:
				t.Errorf("fn ran %d times, want 1: a lost COMMIT must not be re-run", runs)
			case !tt.uncertain && err != nil:
				t.Errorf("err = %s, want nil (the marker is on the promoted standby)", txretry.Describe(err))
			case tt.uncertain && !(errors.As(err, &ue) && ue.VerifyErr != nil && strings.Contains(ue.VerifyErr.Error(), "timeline changed")):
				t.Errorf("err = %v, want ErrCommitUncertain from the timeline check", err)
			}
			if n := applied(); n != 1 {
				t.Errorf("the transfer is applied %d times on the promoted standby, want 1", n)
			}
		})
	}
}
