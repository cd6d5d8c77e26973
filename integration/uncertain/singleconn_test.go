package uncertain

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// On a handle of one connection, the connection lost with the commit is the
// only one: a built-in verifier says so at once instead of retrying on the
// dead connection until its timeout.
func TestBuiltInVerifierOnASingleConnectionFailsFast(t *testing.T) {
	noLeaks(t)
	var runs int32
	p, d, err := lostCommitOnOneConn(t, "single", &runs, txretry.WithXactStatusVerification())
	var ue *txretry.CommitUncertainError
	if !errors.As(err, &ue) || ue.VerifyErr == nil || !strings.Contains(ue.VerifyErr.Error(), "single connection") {
		t.Fatalf("err = %v, want ErrCommitUncertain saying the handle is a single connection", err)
	}
	if d > 5*time.Second {
		t.Fatalf("took %v: verification should give up at once", d)
	}
	if runs != 1 || p.count(t, "single") != 1 {
		t.Fatalf("runs=%d applied=%d, want 1 and 1 (the commit landed, fn not re-run)", runs, p.count(t, "single"))
	}
}

// lostCommitOnOneConn runs the insert of id on a single *pgx.Conn through
// the proxy, with opts, and drops the connection once the server has
// committed; it returns the path, how long the call took and its error.
func lostCommitOnOneConn(t *testing.T, id string, runs *int32, opts ...txretry.Option) (*path, time.Duration, error) {
	t.Helper()
	_, direct, proxy, proxied := pgSetup(t)
	conn, err := pgx.ConnectConfig(context.Background(), proxied)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	p := &path{name: "pgx-conn", pg: true, direct: direct, proxy: proxy, ph: pgPlaceholder}
	proxy.Arm(faultproxy.DropAfterCommit)
	start := time.Now()
	err = pgxretry.RunInTx(context.Background(), conn, func(ctx context.Context, tx pgx.Tx) error {
		return p.insert(id, runs)(ctx, func(ctx context.Context, q string, args ...any) error {
			_, err := tx.Exec(ctx, q, args...)
			return err
		})
	}, append(opts, txretry.WithVerifyTimeout(20*time.Second))...)
	return p, time.Since(start), err
}
