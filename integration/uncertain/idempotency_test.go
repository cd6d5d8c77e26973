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
// one the server applied but whose reply was lost or stalled is found by
// the probe of the call's marker to be this call's commit (nil, after one
// run of fn); and a re-submission of the request is answered
// ErrAlreadyCommitted without running fn. The call's after-commit hook
// runs once in each case.
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
					var verified verifications
					hooks := 0
					p.proxy.Arm(fault)
					err := p.run(context.Background(), func(ctx context.Context, exec execer) error {
						txretry.AfterCommit(ctx, func(context.Context) { hooks++ })
						return p.insert(id, &runs)(ctx, exec)
					}, append(opts, txretry.WithObserver(&verified))...)
					p.proxy.Release()
					// The server committed: found to be this call's commit.
					wantRuns, want := int32(1), txretry.VerifiedCommitted
					if fault == faultproxy.DropBeforeCommit {
						wantRuns, want = 2, txretry.VerifiedNotCommitted // retried
					}
					if err != nil || runs != wantRuns {
						t.Fatalf("err = %v after %d runs, want nil after %d", err, runs, wantRuns)
					}
					if len(verified) != 1 || verified[0] != want {
						t.Fatalf("verifications %v, want [%v]", verified, want)
					}
					if hooks != 1 {
						t.Fatalf("the after-commit hook ran %d times, want once", hooks)
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

// TestIdempotencyKeyLostCommitOtherCall: this call's COMMIT is lost before
// the server gets it, while a concurrent call with the same key (on a
// direct connection, not through the proxy) waits on the key's row lock.
// The server rolls this call's transaction back, the other call commits,
// and this call's probe finds its own marker not committed: it is retried,
// the retry finds the key committed by the other call, and the call
// returns ErrAlreadyCommitted with the other call's effect the only one,
// and without running its after-commit hook.
func TestIdempotencyKeyLostCommitOtherCall(t *testing.T) {
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
			ctx := context.Background()
			id := "other-" + p.name
			var verified verifications
			opts := []txretry.Option{txretry.WithIdempotencyKey(keyTable, id), txretry.WithObserver(&verified),
				txretry.WithCommitTimeout(commitTimeout), txretry.WithVerifyTimeout(20 * time.Second)}
			const otherAttempt = 100 // the other call's effect row
			var runs, otherRuns int32
			hooks := 0
			otherErr := make(chan error, 1)
			p.proxy.Arm(faultproxy.DropBeforeCommit)
			err = p.run(ctx, func(ctx context.Context, exec execer) error {
				txretry.AfterCommit(ctx, func(context.Context) { hooks++ })
				if err := p.insert(id, &runs)(ctx, exec); err != nil {
					return err
				}
				if runs > 1 {
					return nil
				}
				// This call holds the key: start the other call, and
				// commit once it waits on the key.
				go func() {
					otherErr <- txretry.RunInTx(context.Background(), p.direct, func(ctx context.Context, tx *sql.Tx) error {
						addInt32(&otherRuns)
						_, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO effects (id, attempt) VALUES (%s, %s)", p.ph(1), p.ph(2)), id, otherAttempt)
						return err
					}, txretry.WithIdempotencyKey(keyTable, id))
				}()
				return p.waitForKeyWaiter(ctx)
			}, opts...)
			p.proxy.Release()
			if err != txretry.ErrAlreadyCommitted { //nolint:errorlint // the plain sentinel
				t.Fatalf("err = %v, want ErrAlreadyCommitted", err)
			}
			if oerr := <-otherErr; oerr != nil || otherRuns != 1 {
				t.Fatalf("the other call: %v after %d runs, want nil after one", oerr, otherRuns)
			}
			if runs != 1 {
				t.Fatalf("fn ran %d times, want once: the retry must find the key", runs)
			}
			if len(verified) != 1 || verified[0] != txretry.VerifiedNotCommitted {
				t.Fatalf("verifications %v, want the probe to find this call's commit lost", verified)
			}
			if hooks != 0 {
				t.Fatalf("the after-commit hook ran %d times for a call that did not commit", hooks)
			}
			var attempt int
			if err := p.direct.QueryRow("SELECT attempt FROM effects WHERE id = "+p.ph(1), id).Scan(&attempt); err != nil || attempt != otherAttempt {
				t.Fatalf("effects: attempt %d, %v; want only the other call's", attempt, err)
			}
			p.noneInUse(t)
		})
	}
}

// verifications records the answers of a call's verifier; the call's
// goroutine is the only one observing.
type verifications []txretry.Verification

func (v *verifications) Observe(_ context.Context, e txretry.Event) {
	if e.Kind == txretry.CommitVerified {
		*v = append(*v, e.Verification)
	}
}

// waitForKeyWaiter waits until another connection to the path's database
// runs the key's INSERT: on PostgreSQL until it waits for a lock; MariaDB
// does not always list a transaction waiting for a lock on an INSERT in
// information_schema.innodb_trx, so there until the statement runs.
func (p *path) waitForKeyWaiter(ctx context.Context) error {
	q := "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()" +
		" AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO " + keyTable + " %'"
	if !p.pg {
		q = "SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE()" +
			" AND info LIKE 'INSERT INTO " + keyTable + " %'"
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := p.direct.QueryRowContext(ctx, q).Scan(&n); err != nil || n > 0 {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("the other call does not wait for the key")
		}
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
