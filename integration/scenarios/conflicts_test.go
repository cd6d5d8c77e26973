package scenarios

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/txretry/txretry/txretry"
)

// errLastDoctor is the domain error of a doctor who may not go off call.
var errLastDoctor = errors.New("the last doctor on call cannot go off call")

// goOffCall is the write-skew transaction: a doctor may go off call only if
// another one stays on call. The first attempts of the concurrent calls
// meet at g after their read, so that both read before either writes; a
// retry waits for the other call (see pair).
func goOffCall(pr *pair, g *gate, party int, name string, runs *atomic.Int32) txFunc {
	return func(ctx context.Context, q querier) error {
		runs.Add(1)
		if err := pr.settle(ctx, party); err != nil {
			return err
		}
		first := txretry.Attempt(ctx) == 1
		if first {
			defer g.arrive(party)
		}
		var onCall int
		if err := q.queryRow(ctx, "SELECT COUNT(*) FROM doctors WHERE on_call = 1").Scan(&onCall); err != nil {
			return err
		}
		if first {
			if err := g.await(ctx, party); err != nil {
				return err
			}
		}
		if onCall < 2 {
			return errLastDoctor
		}
		return q.exec(ctx, "UPDATE doctors SET on_call = 0 WHERE name = $1", name)
	}
}

// TestWriteSkew: two on-call doctors go off call at the same time. Under
// SERIALIZABLE with retries exactly one succeeds; the other's conflict is
// retried, its new attempt sees the change and refuses with the domain
// error, returned unchanged. PostgreSQL detects the rw-antidependency cycle
// (40001); MySQL and MariaDB make the reads locking under SERIALIZABLE, so
// the two updates deadlock (1213) and the victim is retried the same way.
// Under READ COMMITTED without retries the anomaly shows: both go off call.
func TestWriteSkew(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, "CREATE TABLE doctors (name VARCHAR(16) PRIMARY KEY, on_call INT NOT NULL)")
		names := []string{"alice", "bob"}
		reset := func(t *testing.T) {
			p.setup(t, ctx, "DELETE FROM doctors", "INSERT INTO doctors (name, on_call) VALUES ('alice', 1), ('bob', 1)")
		}

		// In both subtests the two calls wait for each other inside fn, on
		// the handle's default contention gate: a fresh one at width 1
		// (slow start) here, one the conflict narrowed to 1 below. They
		// pass only because a gate that stands still while callers queue
		// widens; without that both subtests fail at their deadlines.
		t.Run("serializable", func(t *testing.T) {
			reset(t)
			pr, g := newPair(), newGate(2)
			var runs [2]atomic.Int32
			var ev events
			errs := pr.run(func(i int) error {
				return p.run(ctx, goOffCall(pr, g, i, names[i], &runs[i]),
					txretry.WithIsolation(sql.LevelSerializable), ev.option())
			})

			winner, loser := 0, 1
			if errs[0] != nil {
				winner, loser = 1, 0
			}
			if errs[winner] != nil || !errors.Is(errs[loser], errLastDoctor) {
				t.Fatalf("errors = %v; want one nil and one errLastDoctor", errs)
			}
			if errs[loser] != errLastDoctor {
				t.Errorf("domain error came back as %v, want it unchanged", errs[loser])
			}
			if w, l := runs[winner].Load(), runs[loser].Load(); w != 1 || l != 2 {
				t.Errorf("fn runs: winner %d, loser %d; want 1 and 2", w, l)
			}
			if n := p.count(t, ctx, "SELECT COUNT(*) FROM doctors WHERE on_call = 1"); n != 1 {
				t.Errorf("doctors on call = %d, want 1", n)
			}
			failed := ev.of(txretry.AttemptFailed)
			if len(failed) != 2 || failed[0].Code != p.d.serialization || failed[0].Class != txretry.Retryable {
				t.Errorf("failed attempts = %+v; want a retryable %s, then the domain error", failed, p.d.serialization)
			}
		})

		t.Run("read committed shows the anomaly", func(t *testing.T) {
			reset(t)
			pr, g := newPair(), newGate(2)
			var runs [2]atomic.Int32
			errs := pr.run(func(i int) error {
				return p.run(ctx, goOffCall(pr, g, i, names[i], &runs[i]),
					txretry.WithIsolation(sql.LevelReadCommitted), txretry.WithMaxAttempts(1))
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("RunInTx: %v", err)
			}
			if n := p.count(t, ctx, "SELECT COUNT(*) FROM doctors WHERE on_call = 1"); n != 0 {
				t.Errorf("doctors on call = %d, want 0 (write skew)", n)
			}
		})
	})
}

// crossLock is a deadlock between two parties: party 0 adds 1 to account 1
// then to account 2, party 1 to account 2 then to account 1, and each then
// inserts its marker row 100+party into items. The first attempts meet at
// the gate once each holds its first row, so the second updates deadlock.
// A retry waits for the other call (see pair). With swallow, the first
// attempt ignores the errors of its second update
// and of the insert and returns nil.
type crossLock struct {
	pair    *pair
	gate    *gate
	swallow bool
	runs    [2]atomic.Int32
	// victim records that the party's first attempt got the deadlock error.
	victim [2]atomic.Bool
}

// crossLockDDL creates the tables of crossLock.
var crossLockDDL = []string{
	"CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL)",
	"INSERT INTO accounts (id, balance) VALUES (1, 100), (2, 100)",
	itemsDDL,
}

func newCrossLock(swallow bool) *crossLock {
	return &crossLock{pair: newPair(), gate: newGate(2), swallow: swallow}
}

func (c *crossLock) fn(d *dialect, party int) txFunc {
	order := [2][2]int{{1, 2}, {2, 1}}[party]
	return func(ctx context.Context, q querier) error {
		c.runs[party].Add(1)
		if err := c.pair.settle(ctx, party); err != nil {
			return err
		}
		first := txretry.Attempt(ctx) == 1
		if first {
			defer c.gate.arrive(party)
		}
		if err := q.exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", order[0]); err != nil {
			return err
		}
		if first {
			if err := c.gate.await(ctx, party); err != nil {
				return err
			}
		}
		err := q.exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", order[1])
		if first && d.codeOf(err) == d.deadlock {
			c.victim[party].Store(true)
		}
		if err != nil && !(first && c.swallow) {
			return err
		}
		err = q.exec(ctx, "INSERT INTO items (id) VALUES ($1)", 100+party)
		if first && c.swallow {
			return nil
		}
		return err
	}
}

// run runs both parties concurrently and returns their errors and the
// victim's index, failing t unless exactly one party was the victim.
func (c *crossLock) run(t *testing.T, ctx context.Context, p *driverPath, opts ...txretry.Option) (errs []error, victim int) {
	t.Helper()
	errs = c.pair.run(func(i int) error { return p.run(ctx, c.fn(p.d, i), opts...) })
	if c.victim[0].Load() == c.victim[1].Load() {
		t.Fatalf("victims = %v, %v (errors %v); want exactly one deadlock victim", c.victim[0].Load(), c.victim[1].Load(), errs)
	}
	if c.victim[1].Load() {
		victim = 1
	}
	return errs, victim
}

// checkApplied checks that both parties' transactions were applied once:
// each added 1 to both accounts and inserted its marker row.
func (c *crossLock) checkApplied(t *testing.T, ctx context.Context, p *driverPath) {
	t.Helper()
	if n := p.count(t, ctx, "SELECT SUM(balance) FROM accounts"); n != 204 {
		t.Errorf("sum of balances = %d, want 204", n)
	}
	if n := p.count(t, ctx, "SELECT COUNT(*) FROM items"); n != 2 {
		t.Errorf("%d marker rows, want 2", n)
	}
}

// TestDeadlock: two transactions lock rows 1 then 2 and 2 then 1. The
// server aborts one of them (40P01 after deadlock_timeout on PostgreSQL,
// 1213 at once on MySQL); txretry re-runs it, it then waits for the other's
// commit and succeeds. Both calls succeed, the victim's fn ran twice, and
// both transactions are applied once.
func TestDeadlock(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, crossLockDDL...)
		c := newCrossLock(false)
		var ev events
		errs, victim := c.run(t, ctx, p, ev.option())
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("RunInTx: %v", err)
		}
		if v, w := c.runs[victim].Load(), c.runs[1-victim].Load(); v != 2 || w != 1 {
			t.Errorf("fn runs: victim %d, other %d; want 2 and 1", v, w)
		}
		failed := ev.of(txretry.AttemptFailed)
		if len(failed) != 1 || failed[0].Code != p.d.deadlock || failed[0].Attempt != 1 || failed[0].Class != txretry.Retryable {
			t.Errorf("failed attempts = %+v; want one retryable %s", failed, p.d.deadlock)
		}
		c.checkApplied(t, ctx, p)
	})
}

// TestSerializationFailureAtCommit: the classic rw-antidependency cycle on
// PostgreSQL where the error comes at COMMIT. Each transaction sums one
// class of the ledger and inserts the sum into the other class; both read,
// then both insert, then both return nil. SSI lets both inserts through and
// fails one COMMIT with 40001, after fn returned nil; txretry re-runs that
// transaction once the other call has returned (see pair), and the new
// attempt sees the other's row. Both calls succeed and
// the ledger is one of the two serial outcomes.
func TestSerializationFailureAtCommit(t *testing.T) {
	forEachPath(t, postgresPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx,
			"CREATE TABLE ledger (id SERIAL PRIMARY KEY, class INT NOT NULL, amount INT NOT NULL)",
			"CREATE INDEX ledger_class ON ledger (class)",
			"INSERT INTO ledger (class, amount) VALUES (1, 10), (2, 20)")
		pr, read, wrote := newPair(), newGate(2), newGate(2)
		var (
			runs     [2]atomic.Int32
			firstNil [2]atomic.Bool // attempt 1 of fn returned nil
			ev       [2]events
		)
		errs := pr.run(func(i int) error {
			from, to := i+1, 2-i
			return p.run(ctx, func(ctx context.Context, q querier) error {
				runs[i].Add(1)
				if err := pr.settle(ctx, i); err != nil {
					return err
				}
				first := txretry.Attempt(ctx) == 1
				if first {
					defer read.arrive(i)
					defer wrote.arrive(i)
				}
				var sum int
				if err := q.queryRow(ctx, "SELECT COALESCE(SUM(amount), 0) FROM ledger WHERE class = $1", from).Scan(&sum); err != nil {
					return err
				}
				if first {
					if err := read.await(ctx, i); err != nil {
						return err
					}
				}
				if err := q.exec(ctx, "INSERT INTO ledger (class, amount) VALUES ($1, $2)", to, sum); err != nil {
					return err
				}
				if first {
					if err := wrote.await(ctx, i); err != nil {
						return err
					}
					firstNil[i].Store(true)
				}
				return nil
			}, txretry.WithIsolation(sql.LevelSerializable), ev[i].option())
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("RunInTx: %v", err)
		}
		loser := 0
		if runs[1].Load() == 2 {
			loser = 1
		}
		if r := runs[0].Load() + runs[1].Load(); r != 3 || runs[loser].Load() != 2 {
			t.Fatalf("fn runs = %d and %d; want 1 and 2", runs[0].Load(), runs[1].Load())
		}
		failed := ev[loser].of(txretry.AttemptFailed)
		if len(failed) != 1 || failed[0].Attempt != 1 || failed[0].Code != "40001" {
			t.Errorf("failed attempts = %+v; want attempt 1 with 40001", failed)
		}
		if !firstNil[loser].Load() {
			t.Errorf("fn of the failed attempt did not return nil: the 40001 did not come at COMMIT")
		}
		// Serial outcomes: T0 then T1 inserts (2, 10) then (1, 30);
		// T1 then T0 inserts (1, 20) then (2, 30).
		got := map[[2]int]bool{}
		if err := p.db.forEach(ctx, "SELECT class, amount FROM ledger WHERE id > 2", nil, func(r row) error {
			var k [2]int
			err := r.Scan(&k[0], &k[1])
			got[k] = true
			return err
		}); err != nil {
			t.Fatal(err)
		}
		serial := got[[2]int{2, 10}] && got[[2]int{1, 30}] || got[[2]int{1, 20}] && got[[2]int{2, 30}]
		if len(got) != 2 || !serial {
			t.Errorf("inserted rows %v are not a serial outcome", got)
		}
	})
}
