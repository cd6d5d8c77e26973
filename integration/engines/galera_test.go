package engines

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/txretry"
)

// galeraNodes is the number of nodes galera.sh runs.
const galeraNodes = 3

// markerTable is the commit-marker table of the tests.
const markerTable = "txretry_commit_markers"

// galera is the test's database on the cluster, reached through each node.
type galera struct {
	name string
	// cfgs are the nodes' driver configurations for the test database.
	cfgs []*mysql.Config
	// dbs write through each node (wsrep_sync_wait = 0, the default).
	dbs []*sql.DB
	// synced read through each node with wsrep_sync_wait = 1, so that a
	// read sees every write-set the cluster committed before it started.
	synced []*sql.DB
}

// newGalera creates a database for the test on the cluster of
// TXRETRY_GALERA_DSNS and opens it through every node. The database is
// dropped when the test ends.
func newGalera(t *testing.T) *galera {
	t.Helper()
	raw := requireEnv(t, envGaleraDSNs, "galera.sh")
	parts := strings.Split(raw, ",")
	if len(parts) != galeraNodes {
		t.Fatalf("%s holds %d DSNs, want %d (one per node)", envGaleraDSNs, len(parts), galeraNodes)
	}
	g := &galera{name: dbName(t)}
	for i, p := range parts {
		cfg, err := mysql.ParseDSN(strings.TrimSpace(p))
		if err != nil {
			t.Fatalf("%s, DSN %d: %v", envGaleraDSNs, i+1, err)
		}
		cfg.DBName = g.name
		cfg.ParseTime = true
		cfg.Timeout = 5 * time.Second
		// go-sql-driver ignores contexts during COMMIT: readTimeout bounds
		// it, and must outlast a view change (evs.suspect_timeout, 5 s).
		cfg.ReadTimeout = 30 * time.Second
		cfg.WriteTimeout = 30 * time.Second
		g.cfgs = append(g.cfgs, cfg)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := g.cfgs[0].Clone()
	admin.DBName = ""
	if err := execOn(ctx, admin, "CREATE DATABASE "+g.name); err != nil {
		t.Fatalf("create database on node 1 of %s: %v", envGaleraDSNs, err)
	}
	t.Cleanup(func() { g.drop(t) })
	// Node 1 acknowledges CREATE DATABASE once it has run it; the other
	// nodes apply it a little later. A connection that names the database
	// fails with error 1049 until then, so wait for every node to see it.
	for i, cfg := range g.cfgs {
		if err := waitForDatabase(ctx, cfg, g.name); err != nil {
			t.Fatalf("node %d of %s: %v", i+1, envGaleraDSNs, err)
		}
	}
	for _, cfg := range g.cfgs {
		g.dbs = append(g.dbs, openMySQL(t, cfg))
		sc := cfg.Clone()
		sc.Params = map[string]string{"wsrep_sync_wait": "1"}
		g.synced = append(g.synced, openMySQL(t, sc))
	}
	return g
}

// drop drops the test database through the first node that answers (a test
// may leave a node down when it fails).
func (g *galera) drop(t *testing.T) {
	var errs []error
	for _, cfg := range g.cfgs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		admin := cfg.Clone()
		admin.DBName = ""
		err := execOn(ctx, admin, "DROP DATABASE IF EXISTS "+g.name)
		cancel()
		if err == nil {
			return
		}
		errs = append(errs, err)
	}
	t.Errorf("drop database %s: %v", g.name, errors.Join(errs...))
}

// waitForDatabase waits until the node of cfg sees database name. The
// query runs with wsrep_sync_wait = 1, so it waits for the node to apply
// every write-set committed before it; it is repeated in case the node is
// still joining, until ctx ends.
func waitForDatabase(ctx context.Context, cfg *mysql.Config, name string) error {
	admin := cfg.Clone()
	admin.DBName = ""
	admin.Params = map[string]string{"wsrep_sync_wait": "1"}
	c, err := mysql.NewConnector(admin)
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	for {
		var n int
		err := db.QueryRowContext(ctx,
			"SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n)
		if err == nil && n == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("database %s not visible: %w (last query: %v)", name, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// execOn runs one statement on a short-lived connection.
func execOn(ctx context.Context, cfg *mysql.Config, query string) error {
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	_, err = db.ExecContext(ctx, query)
	return err
}

// openMySQL opens a pool for cfg, closed when the test ends.
func openMySQL(t *testing.T, cfg *mysql.Config) *sql.DB {
	t.Helper()
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("mysql connector: %v", err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db
}

// createBank creates accounts 1..n with balance each through node 1 and
// waits until every node sees them.
func (g *galera) createBank(t *testing.T, n int, balance int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stmts := []string{
		"CREATE TABLE accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
		mustDDL(t),
	}
	for _, s := range stmts {
		if _, err := g.dbs[0].ExecContext(ctx, s); err != nil {
			t.Fatalf("setup: %v", err)
		}
	}
	for id := 1; id <= n; id++ {
		if _, err := g.dbs[0].ExecContext(ctx, "INSERT INTO accounts (id, balance) VALUES (?, ?)", id, balance); err != nil {
			t.Fatalf("setup: insert account: %v", err)
		}
	}
	for i := range g.synced {
		if got := g.balances(t, i); len(got) != n {
			t.Fatalf("node %d sees %d accounts after setup, want %d", i+1, len(got), n)
		}
	}
}

func mustDDL(t *testing.T) string {
	t.Helper()
	ddl, err := txretry.CommitMarkerDDL(markerTable)
	if err != nil {
		t.Fatalf("CommitMarkerDDL: %v", err)
	}
	return ddl
}

// balances reads the balances through node i (0-based) with
// wsrep_sync_wait = 1.
func (g *galera) balances(t *testing.T, i int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := queryBalances(ctx, g.synced[i])
	if err != nil {
		t.Fatalf("read balances through node %d: %v", i+1, err)
	}
	return got
}

// queryer is what *sql.DB and *sql.Tx have in common.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryBalances(ctx context.Context, q queryer) ([]int64, error) {
	rows, err := q.QueryContext(ctx, "SELECT balance FROM accounts ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var b int64
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// transfer is one move of amount from account from to account to (1-based).
type transfer struct {
	from, to int
	amount   int64
}

// apply adds the effect of moves to balances.
func apply(balances []int64, moves []transfer) {
	for _, m := range moves {
		balances[m.from-1] -= m.amount
		balances[m.to-1] += m.amount
	}
}

// transferTx returns the transaction body of m for database/sql.
func transferTx(m transfer) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		for _, s := range []struct {
			id    int
			delta int64
		}{{m.from, -m.amount}, {m.to, m.amount}} {
			res, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + ? WHERE id = ?", s.delta, s.id)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				return fmt.Errorf("update account %d: %d rows affected (%v)", s.id, n, err)
			}
		}
		return nil
	}
}

// TestGaleraCertificationConflicts runs concurrent transfers on all three
// nodes over a few accounts: transactions on different nodes that update the
// same rows fail certification, which MariaDB reports as error 1213
// (ER_LOCK_DEADLOCK) at COMMIT or, when the applier aborts a local
// transaction, at its next statement. The test requires failures at COMMIT
// (fn had returned nil), the case a single server never produces. txretry
// retries them; every transfer must end up applied exactly once, as read
// from every node.
func TestGaleraCertificationConflicts(t *testing.T) {
	checkLeaks(t)
	g := newGalera(t)
	const (
		accounts        = 5
		initial         = 1000
		workersPerNode  = 4
		transfersPerWkr = 10
		maxRounds       = 5
	)
	g.createBank(t, accounts, initial)
	want := slices.Repeat([]int64{initial}, accounts)
	obs := newCounter()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// atCommit counts the attempts that failed with 1213 after fn had
	// returned nil: those the certification of the write set failed at
	// COMMIT, which is what Galera's optimistic replication adds to a single
	// server's deadlocks.
	var calls, inStatements atomic.Int64
	atCommit := func() int64 { return int64(obs.failed("1213")) - inStatements.Load() }
	for round := 1; round <= maxRounds; round++ {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			moves []transfer
		)
		for node := range galeraNodes {
			for w := range workersPerNode {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rnd := rand.New(rand.NewPCG(uint64(round), uint64(node*100+w)))
					for range transfersPerWkr {
						from := 1 + rnd.IntN(accounts)
						to := 1 + (from+rnd.IntN(accounts-1))%accounts
						m := transfer{from: from, to: to, amount: 1 + rnd.Int64N(10)}
						fn := transferTx(m)
						err := txretry.RunInTx(ctx, g.dbs[node], func(ctx context.Context, tx *sql.Tx) error {
							err := fn(ctx, tx)
							if n, _ := mysqlerr.Number(err); n == 1213 {
								inStatements.Add(1)
							}
							return err
						},
							txretry.WithMaxAttempts(100),
							txretry.WithTimeBudget(time.Minute),
							txretry.WithObserver(obs),
							txretry.WithLabel("transfer"))
						calls.Add(1)
						if err != nil {
							t.Errorf("transfer on node %d: %s", node+1, errChain(err))
							continue
						}
						mu.Lock()
						moves = append(moves, m)
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
		apply(want, moves)
		t.Logf("round %d: %d transfers committed; %d failed with 1213 at COMMIT, %d in a statement; %s",
			round, len(moves), atCommit(), inStatements.Load(), obs)
		if t.Failed() || atCommit() > 0 {
			break
		}
	}
	if atCommit() == 0 {
		t.Errorf("no attempt failed with 1213 at COMMIT in %d calls (%d in a statement): the test did not produce certification failures",
			calls.Load(), inStatements.Load())
	}
	for i := range galeraNodes {
		got := g.balances(t, i)
		if !slices.Equal(got, want) {
			t.Errorf("node %d: balances %v, want %v", i+1, got, want)
		}
	}
}

// switchConnector connects to one of several targets, chosen by an index the
// test moves: it stands for a load balancer that sends new connections to
// another node once the first one is lost.
type switchConnector struct {
	targets []driver.Connector
	current atomic.Int32
}

func newSwitchConnector(t *testing.T, cfgs ...*mysql.Config) *switchConnector {
	t.Helper()
	s := &switchConnector{}
	for _, cfg := range cfgs {
		c, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatalf("mysql connector: %v", err)
		}
		s.targets = append(s.targets, c)
	}
	return s
}

// Connect implements driver.Connector.
func (s *switchConnector) Connect(ctx context.Context) (driver.Conn, error) {
	return s.targets[s.current.Load()].Connect(ctx)
}

// Driver implements driver.Connector.
func (s *switchConnector) Driver() driver.Driver { return s.targets[0].Driver() }

// use sends new connections to target i.
func (s *switchConnector) use(i int) { s.current.Store(int32(i)) }

// clusterScript returns the path of galera.sh, or skips (fails under CI)
// the test when the cluster was not started by it: the tests that stop,
// freeze or kill nodes drive the script.
func clusterScript(t *testing.T) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "cluster", "galera.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runScript(t, path, "status"); err != nil {
		unavailable(t, fmt.Sprintf("this test drives integration/cluster/galera.sh, whose cluster is not all Synced (%v):\n%s", err, out))
	}
	return path
}

// runScript runs galera.sh with args and returns its combined output.
func runScript(t *testing.T, path string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", append([]string{path}, args...)...).CombinedOutput()
	return string(out), err
}

// nodePid returns the process id of node n (1-based).
func nodePid(t *testing.T, script string, n int) int {
	t.Helper()
	out, err := exec.Command("bash", script, "pid", strconv.Itoa(n)).Output()
	if err != nil {
		t.Fatalf("galera.sh pid %d: %v", n, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("galera.sh pid %d: %q: %v", n, out, err)
	}
	return pid
}

// restartNode starts node n again (SST or IST) and waits until it is Synced.
func restartNode(t *testing.T, script string, n int) {
	t.Helper()
	start := time.Now()
	if out, err := runScript(t, script, "start-node", strconv.Itoa(n)); err != nil {
		t.Fatalf("galera.sh start-node %d: %v\n%s", n, err, out)
	}
	t.Logf("node %d rejoined and Synced in %v", n, time.Since(start).Round(time.Millisecond))
}
