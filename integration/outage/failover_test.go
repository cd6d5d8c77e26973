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
	"github.com/txretry/txretry/txretry"
)

// TestFailover runs the load of TestRestartPgxPool against a PostgreSQL
// primary with a synchronous streaming standby (pg_basebackup -R,
// synchronous_standby_names = '*'), through pgxpool and a multi-host DSN
// naming both with target_session_attrs=read-write. The primary is killed
// (immediate shutdown, as pg_ctl stop -m immediate), and a second later
// the standby is promoted; new connections find it through the DSN.
//
//   - commit-marker: with WithRetryOnConnectionLoss and WithCommitMarker no
//     call fails. A COMMIT lost with the primary is resolved on the
//     promoted standby, which has every commit the primary acknowledged
//     (synchronous replication) and the marker of those it flushed.
//   - xact-status: with WithXactStatusVerification, a lost COMMIT must not
//     be resolved by pg_xact_status on the promoted standby, whose
//     transaction ids can name other transactions: those calls return
//     ErrCommitUncertain (counted, not failures), and the ledger holds
//     no call twice and none that was reported failed.
func TestFailover(t *testing.T) {
	for _, tt := range []struct {
		name   string
		verify txretry.Option
	}{
		{"commit-marker", txretry.WithCommitMarker(markerTable)},
		{"xact-status", txretry.WithXactStatusVerification()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			primary, standby := primaryWithStandby(t)
			multi := multiHost("127.0.0.1:"+strconv.Itoa(primary.Port()), standby)
			failover := func() window {
				w := window{down: time.Now()}
				if err := primary.Kill(); err != nil {
					t.Errorf("kill primary: %v", err)
				}
				time.Sleep(time.Second)
				if err := standby.Promote(context.Background()); err != nil {
					t.Errorf("promote standby: %v", err)
				}
				w.up = time.Now()
				return w
			}
			p := pgxPool(t, multi)
			rs, w := load(t, p, failover, txretry.WithIsolation(sql.LevelSerializable), tt.verify, txretry.WithRetryOnConnectionLoss())
			s := measure(rs, w)
			t.Logf("failover with WithRetryOnConnectionLoss and %s: %v", tt.name, s)
			l := checkLedger(t, openDB(t, dbserver.Postgres, pgDSN(standby)), rs)
			for _, r := range rs {
				// An uncertain xact-status call must be the timeline check's
				// answer, not a pg_xact_status of the promoted standby.
				var ue *txretry.CommitUncertainError
				if errors.As(r.err, &ue) && ue.VerifyErr != nil && !strings.Contains(ue.VerifyErr.Error(), "timeline changed") {
					t.Errorf("call %d uncertain for another reason than the failover: %s", r.id, txretry.Describe(r.err))
				}
			}
			if s.lostDuring == 0 {
				t.Errorf("no attempt met the failover: the test proved nothing")
			}
			if l.failed > 0 || tt.name == "commit-marker" && l.uncertain > 0 {
				shown := 0
				for _, r := range rs {
					if r.err != nil && shown < 5 {
						shown++
						t.Errorf("call %d failed after %d attempts: %s", r.id, r.obs.attempts, txretry.Describe(r.err))
					}
				}
				t.Errorf("%d calls failed and %d are uncertain across the failover, want 0", l.failed, l.uncertain)
			}
		})
	}
}

// primaryWithStandby starts a private PostgreSQL with the load's schema and
// a synchronous standby of it, both closed when t ends.
func primaryWithStandby(t *testing.T) (primary, standby *dbserver.Private) {
	t.Helper()
	primary = private(t, dbserver.Postgres)
	createSchema(t, openDB(t, dbserver.Postgres, pgDSN(primary)), dbserver.Postgres)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	standby, err := primary.StartStandby(ctx)
	if err != nil {
		unavailable(t, err)
	}
	closeAtEnd(t, standby)
	return primary, standby
}

// multiHost is the DSN naming primary (host:port) and then standby, for
// the read-write one of them, as clients find a promoted standby.
func multiHost(primary string, standby *dbserver.Private) string {
	return "postgres://postgres@" + primary + ",127.0.0.1:" + strconv.Itoa(standby.Port()) +
		"/test?sslmode=disable&connect_timeout=2&target_session_attrs=read-write"
}
