package scenarios

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/lib/pq"

	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
)

// swallowed is what a call returns when fn swallowed a server error and
// returned nil.
type swallowed struct {
	// failed: the call returned an error; commitRollback: it matches
	// pgx.ErrTxCommitRollback (the server answered COMMIT with ROLLBACK);
	// inFailedTx: it matches lib/pq's ErrInFailedTransaction (lib/pq saw
	// the transaction failed and rolled it back instead of sending COMMIT).
	failed, commitRollback, inFailedTx bool
	// code of the swallowed error found in the returned error as the
	// driver's type, or "" when the path cannot know it.
	code string
	// runs of fn.
	runs int32
	// applied: fn's own write is in the database afterwards.
	applied bool
}

// TestSwallowedUniqueViolation: fn inserts a row, then a duplicate, ignores
// the duplicate-key error and returns nil.
//
//   - pgx-native: pgxretry saw the 23505 and the server answered COMMIT with
//     ROLLBACK: the error matches pgx.ErrTxCommitRollback and the 23505.
//   - pgx-stdlib: database/sql cannot see the swallowed error; COMMIT still
//     reports ErrTxCommitRollback, so the call fails.
//   - pq: lib/pq rolls the failed transaction back and reports
//     ErrInFailedTransaction, proven not committed; the call fails.
//   - mysql: MySQL and MariaDB roll back only the failed statement, not the
//     transaction: COMMIT succeeds and the first row is committed. RunInTx
//     returns nil, which is the server's semantics, not a lost error.
func TestSwallowedUniqueViolation(t *testing.T) {
	want := map[string]swallowed{
		pgxNative.name: {failed: true, commitRollback: true, code: "23505", runs: 1},
		pgxStdlib.name: {failed: true, commitRollback: true, runs: 1},
		pqPath.name:    {failed: true, inFailedTx: true, runs: 1},
		mysqlPath.name: {runs: 1, applied: true},
	}
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, itemsDDL, "INSERT INTO items (id) VALUES (1)")
		var runs int32
		err := p.run(ctx, func(ctx context.Context, q querier) error {
			runs++
			if err := q.exec(ctx, "INSERT INTO items (id) VALUES ($1)", 2); err != nil {
				return err
			}
			_ = q.exec(ctx, "INSERT INTO items (id) VALUES ($1)", 1) // swallowed
			return nil
		})
		checkSwallowed(t, ctx, p, want[p.name], err, runs, 2)
	})
}

// TestSwallowedSerializationFailure: on its first attempt fn ignores a
// 40001 raised by the server (and the error of its insert in the failed
// transaction) and returns nil; later attempts do not swallow.
//
//   - pgx-native: pgxretry recorded the 40001, so the COMMIT that the server
//     turned into ROLLBACK is retried; the second attempt commits.
//   - pgx-stdlib: database/sql cannot see the swallowed error; the call fails
//     with ErrTxCommitRollback, not retried.
//   - pq: the call fails with lib/pq's ErrInFailedTransaction, not retried.
func TestSwallowedSerializationFailure(t *testing.T) {
	want := map[string]swallowed{
		pgxNative.name: {runs: 2, applied: true},
		pgxStdlib.name: {failed: true, commitRollback: true, runs: 1},
		pqPath.name:    {failed: true, inFailedTx: true, runs: 1},
	}
	forEachPath(t, postgresPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, itemsDDL)
		var runs int32
		err := p.run(ctx, func(ctx context.Context, q querier) error {
			runs++
			first := txretry.Attempt(ctx) == 1
			if first {
				_ = q.exec(ctx, p.d.raiseRetryable) // swallowed
			}
			err := q.exec(ctx, "INSERT INTO items (id) VALUES ($1)", 3)
			if first {
				return nil
			}
			return err
		}, txretry.WithBackoff(txretry.Constant(0)))
		checkSwallowed(t, ctx, p, want[p.name], err, runs, 3)
	})
}

// TestSwallowedDeadlock: the deadlock of TestDeadlock, but the first
// attempts swallow the error of their second update and of their marker
// insert and return nil. What the victim's call returns:
//
//   - pgx-native: pgxretry recorded the 40P01; the COMMIT turned into
//     ROLLBACK is retried and the second attempt applies everything.
//   - pgx-stdlib: ErrTxCommitRollback; nothing of the victim is applied.
//   - pq: lib/pq's ErrInFailedTransaction; nothing of the victim is applied.
//   - mysql: nil, although only part of fn's work persisted. The deadlock
//     rolled back the whole transaction and left the session outside any
//     transaction, so the marker insert that fn ran afterwards was
//     autocommitted on its own, and the final COMMIT had nothing to commit.
//     The victim's first update is lost, its marker is there, and nothing
//     tells the caller. No retry library can see this once fn has swallowed
//     the error: fn must return the errors of its statements.
func TestSwallowedDeadlock(t *testing.T) {
	type outcome struct {
		swallowed
		// sum of the balances afterwards (200 before; +2 per applied
		// transaction's updates).
		sum int
	}
	want := map[string]outcome{
		pgxNative.name: {swallowed{runs: 2, applied: true}, 204},
		pgxStdlib.name: {swallowed{failed: true, commitRollback: true, runs: 1}, 202},
		pqPath.name:    {swallowed{failed: true, inFailedTx: true, runs: 1}, 202},
		mysqlPath.name: {swallowed{runs: 1, applied: true}, 202},
	}
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, crossLockDDL...)
		c := newCrossLock(true)
		errs, victim := c.run(t, ctx, p, txretry.WithBackoff(txretry.Constant(0)))
		w := want[p.name]
		if errs[1-victim] != nil {
			t.Errorf("the other call failed: %v", errs[1-victim])
		}
		if n := c.runs[1-victim].Load(); n != 1 {
			t.Errorf("the other fn ran %d times, want 1", n)
		}
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM items WHERE id = $1", 100+(1-victim)); n != 1 {
			t.Errorf("the other's marker rows = %d, want 1", n)
		}
		checkSwallowed(t, ctx, p, w.swallowed, errs[victim], c.runs[victim].Load(), 100+victim)
		if n := p.count(t, ctx, "SELECT SUM(balance) FROM accounts"); n != w.sum {
			t.Errorf("sum of balances = %d, want %d", n, w.sum)
		}
	})
}

// checkSwallowed compares a call's result with want; id is the row fn
// inserted.
func checkSwallowed(t *testing.T, ctx context.Context, p *driverPath, want swallowed, err error, runs int32, id int) {
	t.Helper()
	if (err != nil) != want.failed {
		t.Errorf("RunInTx = %v; want failure %v", err, want.failed)
	}
	if got := errors.Is(err, pgx.ErrTxCommitRollback); got != want.commitRollback {
		t.Errorf("RunInTx = %v; matches pgx.ErrTxCommitRollback: %v, want %v", err, got, want.commitRollback)
	}
	if got := errors.Is(err, pq.ErrInFailedTransaction); got != want.inFailedTx {
		t.Errorf("RunInTx = %v; matches pq.ErrInFailedTransaction: %v, want %v", err, got, want.inFailedTx)
	}
	// A COMMIT answered with ROLLBACK proves nothing was committed, and so
	// does lib/pq's rollback of a failed transaction. On the pgx-stdlib and
	// pq paths the database/sql adapter knows them only by the drivers'
	// error texts, which this real server's answer pins (issue 15, defect
	// 5): a driver that words them otherwise makes the call uncertain here.
	if (want.commitRollback || want.inFailedTx) && (!errors.Is(err, txretry.ErrNotCommitted) || errors.Is(err, txretry.ErrCommitUncertain)) {
		t.Errorf("RunInTx = %v; want it proven not committed (ErrNotCommitted), not uncertain", err)
	}
	if code := p.d.codeOf(err); code != want.code {
		t.Errorf("code in the error = %q, want %q", code, want.code)
	}
	if runs != want.runs {
		t.Errorf("fn ran %d times, want %d", runs, want.runs)
	}
	n := p.count(t, ctx, "SELECT COUNT(*) FROM items WHERE id = $1", id)
	if applied := n == 1; applied != want.applied || n > 1 {
		t.Errorf("row %d present %d times; want applied %v", id, n, want.applied)
	}
}

// TestSwallowedAfterAHandledError: on its first attempt fn meets a
// duplicate key inside a savepoint and recovers by rolling the savepoint
// back, as pgx documents for nested transactions; then it swallows a 40001
// and returns nil. The transaction was aborted by the 40001, not by the
// handled 23505, so pgxretry retries, and the second attempt commits.
func TestSwallowedAfterAHandledError(t *testing.T) {
	forEachPath(t, []pathKind{pgxNative}, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, itemsDDL, "INSERT INTO items (id) VALUES (1)")
		var runs int32
		err := p.run(ctx, func(ctx context.Context, q querier) error {
			runs++
			tx := q.handle().(pgx.Tx)
			if txretry.Attempt(ctx) == 1 {
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				if _, err := sp.Exec(ctx, "INSERT INTO items (id) VALUES (1)"); pgerr.SQLState(err) != "23505" {
					return fmt.Errorf("duplicate insert: %v, want 23505", err)
				}
				if err := sp.Rollback(ctx); err != nil {
					return err
				}
				_ = q.exec(ctx, p.d.raiseRetryable) // swallowed
				_ = q.exec(ctx, "INSERT INTO items (id) VALUES (4)")
				return nil
			}
			return q.exec(ctx, "INSERT INTO items (id) VALUES (4)")
		}, txretry.WithBackoff(txretry.Constant(0)))
		checkSwallowed(t, ctx, p, swallowed{runs: 2, applied: true}, err, runs, 4)
	})
}
