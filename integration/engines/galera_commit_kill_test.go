package engines

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/txretry"
)

// TestGaleraConnectionKilledDuringCommit kills, from another session, the
// connection whose COMMIT waits for certification (nodes 2 and 3 frozen, so
// node 1 cannot replicate the write set). What the client sees is a lost
// connection, with no server error: txretry must report the result as
// uncertain and not run fn again, whatever the server did.
//
// The test thaws the nodes as soon as the call returns, well within
// Galera's suspect timeout: certification then completes and the killed
// connection's transaction IS applied on every node, which the test
// requires. So a connection lost during COMMIT can follow an applied
// commit, and "uncertain" is the only honest answer. (By hand, with the
// nodes frozen past the suspect timeout, node 1 lost the primary component
// and the transaction was not applied; KILL QUERY left a COMMIT waiting for
// certification alone, and it committed once the nodes returned; a node
// shut down during that wait answered 1180 "Got error ... during COMMIT",
// which txretry also counts as uncertain.)
func TestGaleraConnectionKilledDuringCommit(t *testing.T) {
	checkLeaks(t)
	g := newGalera(t)
	script := clusterScript(t)
	g.createBank(t, 2, 1000)
	others := []int{nodePid(t, script, 2), nodePid(t, script, 3)}
	thaw := func() {
		for _, pid := range others {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := g.balances(t, 0)
	killed := make(chan error, 1)
	var runs int
	err := txretry.RunInTx(ctx, g.dbs[0], func(ctx context.Context, tx *sql.Tx) error {
		runs++
		var id int64
		if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			return err
		}
		if err := transferTx(transfer{from: 1, to: 2, amount: 1})(ctx, tx); err != nil {
			return err
		}
		for _, pid := range others {
			if err := freeze(pid, 5*time.Second); err != nil {
				return err
			}
		}
		//txretryvet:ok the fault under test: kill this connection while it commits
		go func() { killed <- killWhenCertifying(ctx, g.dbs[0], id) }()
		return nil
	})
	thaw()
	if kerr := <-killed; kerr != nil {
		t.Fatalf("kill the committing connection: %v", kerr)
	}
	t.Logf("RunInTx: %s", errChain(err))
	if !errors.Is(err, txretry.ErrCommitUncertain) {
		t.Fatalf("RunInTx = %v, want ErrCommitUncertain", err)
	}
	if n, ok := mysqlerr.Number(err); ok {
		t.Errorf("the error carries server error %d; want none (the server closes the connection without one)", n)
	}
	if runs != 1 {
		t.Errorf("fn ran %d times, want 1: an uncertain COMMIT is never retried", runs)
	}

	// Wait for the cluster to be whole again, then record what happened.
	if out, err := runScript(t, script, "status"); err != nil {
		time.Sleep(10 * time.Second)
		if out, err = runScript(t, script, "status"); err != nil {
			t.Fatalf("cluster after the test: %v\n%s", err, out)
		}
	}
	got := make([][]int64, len(g.synced))
	for i := range g.synced {
		got[i] = g.balances(t, i)
	}
	t.Logf("balances before %v, after %v per node", before, got)
	want := []int64{before[0] - 1, before[1] + 1}
	for i := range got {
		if !slices.Equal(got[i], want) {
			t.Errorf("node %d: balances %v, want %v: the killed connection's COMMIT applied once", i+1, got[i], want)
		}
	}
}

// killWhenCertifying waits until connection id's COMMIT waits for
// certification, then kills the connection through db.
func killWhenCertifying(ctx context.Context, db *sql.DB, id int64) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var state sql.NullString
		err := db.QueryRowContext(ctx, "SELECT state FROM information_schema.processlist WHERE id = ? AND info = 'COMMIT'", id).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return err
		}
		if state.String == "Waiting for certification" {
			_, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
			return err
		}
	}
	return fmt.Errorf("connection %d's COMMIT never waited for certification", id)
}
