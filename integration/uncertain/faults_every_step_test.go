package uncertain

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/integration/internal/pqconn"
	"github.com/txretry/txretry/txretry"
)

var stepTrials = flag.Int("campaign.steptrials", 0,
	"trials per cell (driver path, verify mode, with or without WithRetryOnConnectionLoss) of TestFaultsAtEveryStep "+
		"(default: one per step and timing, 15 to 21; 50 with TXRETRY_LONG true); the full campaign is 1000")

// longStepTrials is TestFaultsAtEveryStep's trials per cell under
// TXRETRY_LONG (make test-all).
const longStepTrials = 50

// wantStepTrials returns a cell's trials, given its number of distinct
// faults (steps × timings): -campaign.steptrials, else 50 under
// TXRETRY_LONG, else faults (each step broken once at each timing).
func wantStepTrials(faults int) int {
	if *stepTrials > 0 {
		return *stepTrials
	}
	if longMode() {
		return longStepTrials
	}
	return faults
}

// TestFaultsAtEveryStep breaks the connection at one randomly chosen
// message of a call (BEGIN, either statement of fn, the verifier's
// statement before COMMIT, COMMIT, the verifier's probe on its fresh
// connection, the contention manager's lease), before forwarding it, after
// the server's reply to it or in the middle of that reply, and checks on
// the server directly that no effect was lost (nil returned, not applied),
// applied twice, or applied while a failure other than ErrCommitUncertain
// was returned. Each cell (driver path × verify mode × with and without
// WithRetryOnConnectionLoss) runs -campaign.steptrials trials in a database
// of its own, and ends with no connection in use, no server session left
// and no goroutine left; the outcomes are logged as a table. The trials go
// through every step at every timing in a shuffled order, then round again:
// make test's default (one round) breaks each step of each cell at each
// timing once, and each step must have been broken.
func TestFaultsAtEveryStep(t *testing.T) {
	noLeaks(t)
	var (
		mu   sync.Mutex
		rows []*stepCell
		wg   sync.WaitGroup
	)
	// The driver paths run side by side, each in a database of its own and
	// through its cells in turn: a cell's triggers count the requests on
	// its proxy, which only its current trial uses, and its sessions are
	// the only ones in the database beside the direct pool's.
	for _, d := range stepDrivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(d.name, func(t *testing.T) {
				open := d.open(t)
				for _, m := range stepModes {
					if m.pgOnly && !d.pg {
						continue
					}
					for _, connLoss := range []bool{false, true} {
						mu.Lock()
						c := &stepCell{driver: d.name, mode: m, connLoss: connLoss, account: len(rows) + 1,
							outcomes: map[string]int{}, fired: map[string]int{}, armed: map[string]int{}}
						rows = append(rows, c)
						mu.Unlock()
						t.Run(fmt.Sprintf("%s/connloss=%v", m.name, connLoss), func(t *testing.T) { c.run(t, open(t)) })
					}
				}
			})
		}()
	}
	wg.Wait()
	logStepTable(t, rows)
}

// stepPath is one cell's driver path: a pool through a proxy of its own.
type stepPath struct {
	proxy  *faultproxy.Proxy
	direct *sql.DB // not through the proxy: what the server really has
	mysql  bool
	run    runner
	// query returns one integer, through the proxy (the WithVerify
	// callback's lookup).
	query func(ctx context.Context, q string, args ...any) (int64, error)
	inUse func() int
	close func() // closes the proxied pool
	// sessions is the server's count of sessions in the database, less
	// the direct pool's connections: the proxied pool's sessions.
	sessions func(t testing.TB) int
}

func (p *stepPath) ph(n int) string {
	if p.mysql {
		return "?"
	}
	return pgPlaceholder(n)
}

// A stepDriver's open makes the path's database and returns what opens a
// cell's stepPath on it.
type stepDriver struct {
	name string
	pg   bool
	open func(t *testing.T) func(t *testing.T) *stepPath
}

var stepDrivers = []stepDriver{
	{"pgxpool", true, func(t *testing.T) func(*testing.T) *stepPath { return stepPostgres(t, stepPgxPool) }},
	{"pgx-stdlib", true, func(t *testing.T) func(*testing.T) *stepPath {
		return stepPostgres(t, func(t *testing.T, cfg *pgx.ConnConfig, direct *sql.DB, proxy *faultproxy.Proxy) *stepPath {
			return sqlStepPath(t, stdlib.OpenDB(*cfg), direct, proxy, false)
		})
	}},
	{"lib-pq", true, func(t *testing.T) func(*testing.T) *stepPath { return stepPostgres(t, stepLibPQ) }},
	{"mysql", false, stepMySQL},
}

const (
	ledgerTable  = "ledger"
	stepKeyTable = "idem_keys"
	// fn reports conflicts until the contention manager has taken its
	// lease (the armed fault fired), for at most leaseConflicts attempts
	// (below DefaultMaxAttempts) and leaseFor. A time bound, not only a
	// count: a lease that cannot be had at once (the last trial's broken
	// session may still hold the lock for a moment) makes the manager
	// rest a second, and 40 quick conflicts could end before it retried.
	leaseConflicts = 90
	leaseFor       = 8 * time.Second
)

// prepareLedger creates the commit markers' and the keys' tables, the
// ledger (not unique by id, so that a duplicate shows) and the accounts
// its rows are summed into, one per cell.
func prepareLedger(t *testing.T, db *sql.DB, pg bool) {
	t.Helper()
	prepare(t, db, pg)
	ddl, err := txretry.IdempotencyKeysDDL(stepKeyTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE " + ledgerTable + " (id VARCHAR(64) NOT NULL, account INT NOT NULL, amount INT NOT NULL)",
		"CREATE INDEX ledger_id ON " + ledgerTable + " (id)",
		"CREATE TABLE accounts (id INT NOT NULL PRIMARY KEY, balance BIGINT NOT NULL)",
		ddl,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func sessionCounter(direct *sql.DB, pg bool) func(t testing.TB) int {
	q := "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
	if !pg {
		q = "SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE()"
	}
	return func(t testing.TB) int {
		t.Helper()
		var n int
		if err := direct.QueryRow(q).Scan(&n); err != nil {
			t.Fatalf("count sessions: %v", err)
		}
		return n - direct.Stats().OpenConnections
	}
}

// stepPostgres makes a PostgreSQL database; each cell's pool, made by
// pool on a configuration that reaches the server through the cell's
// proxy, is closed at the end of the cell.
func stepPostgres(t *testing.T, pool func(t *testing.T, proxied *pgx.ConnConfig, direct *sql.DB, proxy *faultproxy.Proxy) *stepPath) func(*testing.T) *stepPath {
	cfg, err := pgx.ParseConfig(dbservertest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	direct := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { direct.Close() })
	prepareLedger(t, direct, true)
	return func(t *testing.T) *stepPath {
		proxy := faultproxy.StartPartition(t, hostPort(cfg.Host, cfg.Port), faultproxy.Postgres)
		host, port, _ := net.SplitHostPort(proxy.Addr())
		n, _ := strconv.Atoi(port)
		proxied := cfg.Copy()
		proxied.Host, proxied.Port, proxied.Fallbacks = host, uint16(n), nil
		return pool(t, proxied, direct, proxy)
	}
}

func stepPgxPool(t *testing.T, proxied *pgx.ConnConfig, direct *sql.DB, proxy *faultproxy.Proxy) *stepPath {
	pool := newPgxPool(t, "", proxied)
	return &stepPath{proxy: proxy, direct: direct, close: pool.Close,
		sessions: sessionCounter(direct, true),
		inUse:    func() int { return int(pool.Stat().AcquiredConns()) },
		query: func(ctx context.Context, q string, args ...any) (n int64, err error) {
			err = pool.QueryRow(ctx, q, args...).Scan(&n)
			return n, err
		},
		run: pgxRunner(pool)}
}

func stepLibPQ(t *testing.T, proxied *pgx.ConnConfig, direct *sql.DB, proxy *faultproxy.Proxy) *stepPath {
	// pqconn.DSN keeps the password: a container's server asks for one.
	db, err := pqconn.Open(proxied, 0)
	if err != nil {
		t.Fatal(err)
	}
	return sqlStepPath(t, db, direct, proxy, false)
}

func sqlStepPath(t *testing.T, db, direct *sql.DB, proxy *faultproxy.Proxy, mysql bool) *stepPath {
	t.Cleanup(func() { db.Close() })
	return &stepPath{proxy: proxy, direct: direct, mysql: mysql, run: sqlRunner(db), close: func() { db.Close() },
		sessions: sessionCounter(direct, !mysql),
		inUse:    func() int { return db.Stats().InUse },
		query: func(ctx context.Context, q string, args ...any) (n int64, err error) {
			err = db.QueryRowContext(ctx, q, args...).Scan(&n)
			return n, err
		}}
}

func stepMySQL(t *testing.T) func(*testing.T) *stepPath {
	cfg, direct := mysqlDirect(t)
	prepareLedger(t, direct, false)
	return func(t *testing.T) *stepPath {
		proxy := faultproxy.StartPartition(t, cfg.Addr, faultproxy.MySQL)
		pc := cfg.Clone()
		pc.Addr = proxy.Addr()
		pc.ReadTimeout = 10 * time.Second // no fault here stalls: a safety net only
		c, err := mysql.NewConnector(pc)
		if err != nil {
			t.Fatal(err)
		}
		return sqlStepPath(t, sql.OpenDB(c), direct, proxy, true)
	}
}

// A step is a message of a call that a trial breaks.
const (
	atBegin   = "begin"     // the attempt's BEGIN
	atInsert  = "fn-insert" // fn's first statement
	atUpdate  = "fn-update" // fn's second statement
	atPrepare = "prepare"   // the verifier's statement before COMMIT (the key's before fn)
	atCommit  = "commit"
	atProbe   = "probe" // the verifier's probe, after a COMMIT lost after the server got it
	atLease   = "lease" // the contention manager's lock
)

// stepMode is a way of settling uncertain commits, with the statements
// its verifier sends.
type stepMode struct {
	name   string
	pgOnly bool
	opts   func(p *stepPath, id string) []txretry.Option
	// prepare matches the verifier's statement in the attempt (nil: none);
	// probe the probe's statement, the probeNth of its kind in a trial.
	prepare, probe func(text string) bool
	probeNth       int
	// probeTx: the probe runs in a transaction of its own (BEGIN is a step).
	probeTx bool
}

func contains(s string) func(string) bool {
	return func(text string) bool { return strings.Contains(strings.ToLower(text), s) }
}

func isBegin(text string) bool {
	t := strings.ToLower(strings.TrimSpace(text))
	return strings.HasPrefix(t, "begin") || strings.HasPrefix(t, "start transaction")
}

func isCommitText(text string) bool {
	return strings.EqualFold(strings.TrimSpace(text), "commit")
}

var stepModes = []stepMode{
	{name: "none", opts: func(*stepPath, string) []txretry.Option { return nil }},
	{name: "callback",
		opts: func(p *stepPath, id string) []txretry.Option {
			return []txretry.Option{txretry.WithVerify(func(ctx context.Context) (bool, error) {
				// Through the proxy; a plain read suffices, since a
				// COMMIT the server did not get can never commit later.
				n, err := p.query(ctx, "SELECT count(*) FROM "+ledgerTable+" WHERE id = "+p.ph(1), id)
				return n > 0, err
			})}
		},
		probe: contains("select count(*) from " + ledgerTable), probeNth: 1},
	{name: "xact-status", pgOnly: true,
		opts: func(*stepPath, string) []txretry.Option {
			return []txretry.Option{txretry.WithXactStatusVerification()}
		},
		prepare: contains("pg_current_xact_id_if_assigned"), probe: contains("pg_xact_status"), probeNth: 1, probeTx: true},
	{name: "commit-marker",
		opts: func(*stepPath, string) []txretry.Option {
			return []txretry.Option{txretry.WithCommitMarker(markerTable)}
		},
		prepare: contains("insert into " + markerTable), probe: contains("insert into " + markerTable), probeNth: 2, probeTx: true},
	{name: "idempotency-key",
		opts: func(_ *stepPath, id string) []txretry.Option {
			return []txretry.Option{txretry.WithIdempotencyKey(stepKeyTable, id)}
		},
		prepare: contains("insert into " + stepKeyTable), probe: contains("insert into " + stepKeyTable), probeNth: 2, probeTx: true},
}

var stepTimings = []faultproxy.Fault{faultproxy.DropBeforeCommit, faultproxy.DropAfterCommit, faultproxy.DropMidReply}

// timingName names a fault as the timing of a step's break.
func timingName(f faultproxy.Fault) string {
	switch f {
	case faultproxy.DropBeforeCommit:
		return "before"
	case faultproxy.DropAfterCommit:
		return "after"
	case faultproxy.DropMidReply:
		return "mid-reply"
	}
	return f.String()
}

// stepCell is one cell of the campaign and its figures.
type stepCell struct {
	driver   string
	mode     stepMode
	connLoss bool
	account  int // the accounts row its trials credit

	trials, lost, twice, failedApplied, unexpected int
	outcomes                                       map[string]int // by kind
	armed, fired                                   map[string]int // by step
	// faults are the cell's steps at every timing; broken counts the
	// trials that broke each (by faultName).
	faults []stepTrial
	broken map[string]int
}

// faultName names a step at a timing.
func faultName(step string, timing faultproxy.Fault) string { return step + " " + timingName(timing) }

// stepTrial is one trial's fault and outcome.
type stepTrial struct {
	id     string
	step   string
	timing faultproxy.Fault
	fired  []func() bool
	err    error
	runs   int
}

func (c *stepCell) run(t *testing.T, p *stepPath) {
	t0 := time.Now()
	baseline := p.sessions(t)
	if _, err := p.direct.Exec("INSERT INTO accounts (id, balance) VALUES ("+p.ph(1)+", 0)", c.account); err != nil {
		t.Fatal(err)
	}
	defer func() {
		t.Logf("%d trials in %v:%s", c.trials, time.Since(t0).Round(time.Millisecond), stepTableRow(c))
	}()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	steps := []string{atBegin, atInsert, atUpdate, atCommit, atLease}
	if c.mode.prepare != nil {
		steps = append(steps, atPrepare)
	}
	if c.mode.probe != nil {
		steps = append(steps, atProbe)
	}
	conflict := "DO $$BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END$$"
	if p.mysql {
		conflict = "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'conflict'"
	}
	c.broken = map[string]int{}
	for _, s := range steps {
		for _, tm := range stepTimings {
			c.faults = append(c.faults, stepTrial{step: s, timing: tm})
		}
	}
	faults := c.faults
	var round []stepTrial
	for i := range wantStepTrials(len(faults)) {
		if i%len(faults) == 0 {
			round = slices.Clone(faults)
			rng.Shuffle(len(round), func(a, b int) { round[a], round[b] = round[b], round[a] })
		}
		tr := &stepTrial{id: fmt.Sprintf("%s-%s-%v-%d", c.driver, c.mode.name, c.connLoss, i),
			step: round[i%len(faults)].step, timing: round[i%len(faults)].timing}
		amount := 1 + rng.IntN(100)
		opts := []txretry.Option{txretry.WithCommitTimeout(5 * time.Second), txretry.WithVerifyTimeout(10 * time.Second)}
		if c.connLoss {
			opts = append(opts, txretry.WithRetryOnConnectionLoss())
		}
		opts = append(opts, c.mode.opts(p, tr.id)...)
		arm := func(match func(string) bool, nth int, f faultproxy.Fault) {
			tr.fired = append(tr.fired, p.proxy.ArmAt(faultproxy.Trigger{Match: match, Nth: nth, Fault: f}))
		}
		leased := func() bool { return true }
		switch tr.step {
		case atBegin:
			arm(isBegin, 1, tr.timing)
		case atInsert:
			arm(contains("insert into "+ledgerTable), 1, tr.timing)
		case atUpdate:
			arm(contains("update accounts"), 1, tr.timing)
		case atPrepare:
			arm(c.mode.prepare, 1, tr.timing)
		case atCommit:
			arm(isCommitText, 1, tr.timing)
		case atProbe:
			// The COMMIT reaches the server and its reply is lost, so
			// that the verifier probes.
			arm(isCommitText, 1, stepTimings[1+rng.IntN(2)])
			if c.mode.probeTx && rng.IntN(2) == 0 {
				arm(isBegin, 2, tr.timing) // the probe's BEGIN, after the attempt's
			} else {
				arm(c.mode.probe, c.mode.probeNth, tr.timing)
			}
		case atLease:
			// A fresh manager's domain is made hot without the database
			// (hotDomain); then fn reports conflicts, real ones, until
			// the manager has taken its lease, whose lock is broken: the
			// first conflict of an attempt alone in the closed gate.
			m := hotDomain(t, "lease")
			opts = append(opts, txretry.WithContentionManager(m), txretry.WithLabel("lease"), txretry.WithBackoff(txretry.Constant(0)))
			lock := contains("pg_advisory_xact_lock")
			if p.mysql {
				lock = contains("get_lock(")
				if rng.IntN(2) == 0 {
					lock = contains("release_lock(")
				}
			}
			arm(lock, 1, tr.timing)
			leased = tr.fired[0]
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		start := time.Now()
		tr.err = p.run(ctx, func(ctx context.Context, exec execer) error {
			tr.runs++
			if !leased() && txretry.Attempt(ctx) <= leaseConflicts && time.Since(start) < leaseFor {
				return exec(ctx, conflict)
			}
			if err := exec(ctx, "INSERT INTO "+ledgerTable+" (id, account, amount) VALUES ("+p.ph(1)+", "+p.ph(2)+", "+p.ph(3)+")", tr.id, c.account, amount); err != nil {
				return err
			}
			return exec(ctx, "UPDATE accounts SET balance = balance + "+p.ph(1)+" WHERE id = "+p.ph(2), amount, c.account)
		}, opts...)
		cancel()
		p.proxy.Disarm()
		c.record(t, p, tr)
	}
	c.finish(t, p, baseline)
}

// record checks one trial on the server directly and counts its outcome.
func (c *stepCell) record(t *testing.T, p *stepPath, tr *stepTrial) {
	t.Helper()
	c.trials++
	c.armed[tr.step]++
	if !slices.ContainsFunc(tr.fired, func(f func() bool) bool { return !f() }) {
		c.fired[tr.step]++
		c.broken[faultName(tr.step, tr.timing)]++
	}
	var n int
	if err := p.direct.QueryRow("SELECT count(*) FROM "+ledgerTable+" WHERE id = "+p.ph(1), tr.id).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", tr.id, err)
	}
	kind := stepOutcome(tr.err)
	c.outcomes[kind]++
	bad := ""
	switch {
	case n > 1:
		c.twice++
		bad = "applied twice"
	case kind == "ok" && n == 0:
		c.lost++
		bad = "lost"
	case kind != "ok" && kind != "uncertain" && n > 0:
		c.failedApplied++
		bad = "applied while reported failed"
	}
	// Outcomes the engine should not give here, though no effect is
	// wrong: an error no one classifies, a commit a verifier left
	// unsettled, a connection loss returned despite the option, or
	// retries run out after one fault.
	odd := kind == "other" || kind == "exhausted" || kind == "already" ||
		kind == "uncertain" && c.mode.name != "none" ||
		kind == "conn-lost" && c.connLoss
	if odd {
		c.unexpected++
		if bad == "" {
			bad = "unexpected outcome"
		}
	}
	if bad != "" {
		v := fmt.Sprintf("%s: step %s %s, fired %v, %d runs of fn: %s, returned %s (%v), %d rows",
			tr.id, tr.step, timingName(tr.timing), c.firedAll(tr), tr.runs, bad, kind, tr.err, n)
		t.Error(v)
	}
}

func (*stepCell) firedAll(tr *stepTrial) []bool {
	var out []bool
	for _, f := range tr.fired {
		out = append(out, f())
	}
	return out
}

// finish checks the cell's ledger against its account, and that the pool,
// the server and the proxy are left as found.
func (c *stepCell) finish(t *testing.T, p *stepPath, baseline int) {
	t.Helper()
	var balance, sum int64
	if err := p.direct.QueryRow("SELECT balance FROM accounts WHERE id = "+p.ph(1), c.account).Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if err := p.direct.QueryRow("SELECT COALESCE(SUM(amount), 0) FROM "+ledgerTable+" WHERE account = "+p.ph(1), c.account).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if balance != sum {
		t.Errorf("balance %d, ledger sum %d: a transaction was applied in part", balance, sum)
	}
	for deadline := time.Now().Add(20 * time.Second); p.inUse() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still in use", p.inUse())
		}
	}
	p.close()
	_ = p.proxy.Close()
	// The server ends a session once it sees its connection closed.
	n := p.sessions(t)
	for deadline := time.Now().Add(20 * time.Second); n != baseline; n = p.sessions(t) {
		if time.Now().After(deadline) {
			t.Fatalf("%d server sessions of the proxied pool left, %d before the trials", n, baseline)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c.trials > 0 && c.fired[atCommit] == 0 && c.armed[atCommit] > 0 {
		t.Errorf("no COMMIT trigger fired in %d tries", c.armed[atCommit])
	}
	// A round of trials tries every step at every timing: each must have
	// broken the connection where it meant to, or the cell did not test it.
	if c.trials >= len(c.faults) {
		for _, f := range c.faults {
			if name := faultName(f.step, f.timing); c.broken[name] == 0 {
				t.Errorf("%d trials never broke the connection at %s (the step armed %d times at any timing)", c.trials, name, c.armed[f.step])
			}
		}
	}
}

// stepOutcome is the kind of a call's result.
func stepOutcome(err error) string {
	var re *txretry.RetryError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, txretry.ErrCommitUncertain):
		return "uncertain"
	case errors.Is(err, txretry.ErrAlreadyCommitted):
		return "already"
	case errors.As(err, &re):
		return "exhausted"
	case connError(err):
		return "conn-lost"
	}
	return "other"
}

// connError reports the errors of the drivers for a broken connection.
func connError(err error) bool {
	var ne net.Error
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08")
	}
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.As(err, &ne) ||
		strings.HasSuffix(err.Error(), "conn closed")
}

var stepKinds = []string{"ok", "uncertain", "conn-lost", "exhausted", "already", "other"}

// logStepTable logs one line per cell: outcomes by kind, the three counts
// that must be zero, unexpected outcomes, and the steps broken.
func logStepTable(t *testing.T, cells []*stepCell) {
	slices.SortFunc(cells, func(a, b *stepCell) int {
		return strings.Compare(fmt.Sprint(a.driver, a.mode.name, a.connLoss), fmt.Sprint(b.driver, b.mode.name, b.connLoss))
	})
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-10s %-15s %-8s %6s", "path", "verify", "connloss", "trials")
	for _, k := range stepKinds {
		fmt.Fprintf(&b, " %9s", k)
	}
	fmt.Fprintf(&b, " %5s %5s %13s %10s  steps broken/armed", "lost", "twice", "failed+appl.", "unexpected")
	for _, c := range cells {
		b.WriteString(stepTableRow(c))
	}
	t.Log(b.String())
}

// stepTableRow is a cell's line of the table.
func stepTableRow(c *stepCell) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-10s %-15s %-8v %6d", c.driver, c.mode.name, c.connLoss, c.trials)
	for _, k := range stepKinds {
		fmt.Fprintf(&b, " %9d", c.outcomes[k])
	}
	fmt.Fprintf(&b, " %5d %5d %13d %10d ", c.lost, c.twice, c.failedApplied, c.unexpected)
	for _, s := range []string{atBegin, atInsert, atUpdate, atPrepare, atCommit, atProbe, atLease} {
		if c.armed[s] > 0 {
			fmt.Fprintf(&b, " %s %d/%d", s, c.fired[s], c.armed[s])
		}
	}
	return b.String()
}

// hotDomain returns a fresh contention manager whose domain label has
// closed its gate: a call of an adapter without a database (and without a
// lease), with a 1.9 s time budget, conflicts until the gate is sure to
// have closed (the eleventh conflict doubles the domain's spacing to 1 s,
// more than half the call's time; see txretry/contention.md), then
// commits.
func hotDomain(t *testing.T, label string) *txretry.ContentionManager {
	t.Helper()
	m, err := txretry.NewContentionManager(0)
	if err != nil {
		t.Fatal(err)
	}
	a := &conflicts{n: 30}
	if err := txretry.Run(context.Background(), a, txretry.WithContentionManager(m), txretry.WithLabel(label),
		txretry.WithBackoff(txretry.Constant(0)), txretry.WithTimeBudget(1900*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	return m
}

// conflicts is an Adapter without a database whose fn reports n
// serialization failures, then returns nil.
type conflicts struct{ n int }

type noTx struct{}

func (noTx) Commit(context.Context, time.Duration) error   { return nil }
func (noTx) Rollback(context.Context, time.Duration) error { return nil }
func (noTx) Exec(context.Context, string) error            { return nil }

func (*conflicts) Begin(context.Context, txretry.TxOptions) (noTx, error) { return noTx{}, nil }

func (a *conflicts) Call(context.Context, noTx) error {
	if a.n--; a.n >= 0 {
		return &pgconn.PgError{Code: "40001"}
	}
	return nil
}
