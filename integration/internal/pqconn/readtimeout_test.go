package pqconn

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/integration/internal/faultproxy"
)

func TestMain(m *testing.M) { dbservertest.Main(m) }

// Open's readTimeout bounds the reply to a COMMIT, and no other read: a
// statement that runs three times as long succeeds, a COMMIT whose reply
// the fault proxy holds fails with a timeout.
func TestReadTimeoutBoundsOnlyCOMMIT(t *testing.T) {
	cfg, err := pgx.ParseConfig(dbservertest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.StartPartition(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), faultproxy.Postgres)
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, _ := strconv.Atoi(port)
	cfg.Host, cfg.Port, cfg.Fallbacks = host, uint16(p), nil
	const timeout = 200 * time.Millisecond
	db, err := Open(cfg, timeout)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	if _, err := db.ExecContext(ctx, "SELECT pg_sleep(0.6)"); err != nil {
		t.Fatalf("a 600 ms statement: %v, want no read timeout outside COMMIT", err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_sleep(0.6)"); err != nil {
		t.Fatalf("a 600 ms statement in a transaction: %v, want no read timeout", err)
	}
	proxy.Arm(faultproxy.StallReply)
	defer proxy.Release()
	start := time.Now()
	err = tx.Commit()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("COMMIT with its reply held: %v, want a read timeout", err)
	}
	if d := time.Since(start); d < timeout {
		t.Fatalf("COMMIT failed after %v, before the %v read timeout", d, timeout)
	}
}
