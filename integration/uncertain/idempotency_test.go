package uncertain

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/txretry"
)

const keyTable = "idem_keys"

// TestIdempotencyKeyLostCommit: the key resolves a lost COMMIT by itself.
// A COMMIT that never reached the server is retried and applied once (nil);
// one the server applied but whose reply was lost or stalled is answered
// ErrAlreadyCommitted, as the key cannot tell this call's commit from a
// concurrent one's; and a re-submission of the request is answered
// ErrAlreadyCommitted without running fn.
func TestIdempotencyKeyLostCommit(t *testing.T) {
	noLeaks(t)
	for _, p := range paths(t) {
		t.Run(p.name, func(t *testing.T) {
			ddl, err := txretry.IdempotencyKeysDDL(keyTable)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.direct.Exec(ddl); err != nil {
				t.Fatal(err)
			}
			for _, fault := range []faultproxy.Fault{faultproxy.DropBeforeCommit, faultproxy.DropAfterCommit, faultproxy.StallReply} {
				t.Run(fault.String(), func(t *testing.T) {
					id := fmt.Sprintf("key-%s-%s", p.name, fault)
					var runs int32
					opts := []txretry.Option{txretry.WithIdempotencyKey(keyTable, id),
						txretry.WithCommitTimeout(commitTimeout), txretry.WithVerifyTimeout(20 * time.Second)}
					p.proxy.Arm(fault)
					err := p.run(context.Background(), p.insert(id, &runs), opts...)
					p.proxy.Release()
					if fault == faultproxy.DropBeforeCommit {
						if err != nil || runs != 2 {
							t.Fatalf("err = %v after %d runs, want nil after a retry", err, runs)
						}
					} else {
						var ue *txretry.CommitUncertainError
						if !errors.Is(err, txretry.ErrAlreadyCommitted) || errors.As(err, &ue) || runs != 1 {
							t.Fatalf("err = %v after %d runs, want ErrAlreadyCommitted after one", err, runs)
						}
					}
					if got := p.count(t, id); got != 1 {
						t.Fatalf("effect applied %d times, want exactly once", got)
					}
					err = p.run(context.Background(), p.insert(id, &runs), opts...)
					if err != txretry.ErrAlreadyCommitted { //nolint:errorlint // the plain sentinel
						t.Fatalf("re-submission: %v, want ErrAlreadyCommitted", err)
					}
					if got := p.count(t, id); got != 1 {
						t.Fatalf("effect applied %d times after the re-submission", got)
					}
					p.noneInUse(t)
				})
			}
		})
	}
}

// On a single connection, lost with the commit, the key's probe has no
// connection to run on: the call reports the commit uncertain at once,
// naming the key as the verifier, and a re-submission on a pool then finds
// the key committed. The marker table, which prepare creates, has the key
// table's shape.
func TestIdempotencyKeyOnASingleConnection(t *testing.T) {
	noLeaks(t)
	var runs int32
	p, d, err := lostCommitOnOneConn(t, "single-key", &runs, txretry.WithIdempotencyKey(markerTable, "single-key"))
	var ue *txretry.CommitUncertainError
	if !errors.As(err, &ue) || ue.Verifier != "idempotency-key" || ue.VerifyErr == nil || !strings.Contains(ue.VerifyErr.Error(), "single connection") {
		t.Fatalf("err = %v, want ErrCommitUncertain from the key saying the handle is a single connection", err)
	}
	if d > 5*time.Second {
		t.Fatalf("took %v: verification should give up at once", d)
	}
	err = txretry.RunInTx(context.Background(), p.direct, func(context.Context, *sql.Tx) error {
		runs++
		return nil
	}, txretry.WithIdempotencyKey(markerTable, "single-key"))
	if !errors.Is(err, txretry.ErrAlreadyCommitted) || runs != 1 || p.count(t, "single-key") != 1 {
		t.Fatalf("re-submission: %v after %d runs, want ErrAlreadyCommitted and the effect once", err, runs)
	}
}
