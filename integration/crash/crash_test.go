package crash

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/txretry"
)

// Kills per driver path: shortKills keeps make test fast, longKills runs
// under TXRETRY_LONG (make test-all); the campaign reported in the issue ran
// with -crash.kills 200 (or TXRETRY_CRASH_KILLS=200).
const (
	shortKills = 10
	longKills  = 30
)

var killsFlag = flag.Int("crash.kills", 0, "SIGKILLs per driver path (default: TXRETRY_CRASH_KILLS, else 30 with TXRETRY_LONG true, else 10)")

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(childMain())
	}
	flag.Parse()
	// go-sql-driver logs every broken connection; the faults are on purpose.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	dbservertest.Main(m)
}

func wantKills(t *testing.T) int {
	if *killsFlag > 0 {
		return *killsFlag
	}
	if s := os.Getenv("TXRETRY_CRASH_KILLS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("TXRETRY_CRASH_KILLS=%q: want a positive number", s)
		}
		return n
	}
	if long, _ := strconv.ParseBool(os.Getenv("TXRETRY_LONG")); long {
		return longKills
	}
	return shortKills
}

// TestCrashExactlyOnce runs the campaign on each driver path.
func TestCrashExactlyOnce(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	for _, path := range []string{"pgx", "pgx-stdlib", "pq", "mysql"} {
		t.Run(path, func(t *testing.T) { campaign(t, path) })
	}
}

// answer is what a child printed for a request it submitted.
type answer struct {
	round int
	kind  string // ok, already, err
}

// tally is what the campaign counts.
type tally struct {
	kills, commitKills, rounds              int
	requests, submissions, resubmissions    int // resubmissions: answered ones
	resubmittedAfterApplied, alreadyAnswers int
	appliedUnanswered, errAnswer            int
	anomalies                               []string
}

func (c *tally) anomaly(format string, args ...any) {
	if len(c.anomalies) < 20 {
		c.anomalies = append(c.anomalies, fmt.Sprintf(format, args...))
	}
}

// Each child gets batch requests: the oldest unanswered ones, and at least
// newPerRound new ones.
const (
	batch       = 24
	newPerRound = 4
)

func campaign(t *testing.T, path string) {
	pg := path != "mysql"
	var dsn, upstream string
	var direct *sql.DB
	if pg {
		dsn = dbservertest.Postgres(t)
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		upstream = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
		direct = stdlib.OpenDB(*cfg)
	} else {
		dsn = dbservertest.MySQL(t)
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		upstream = cfg.Addr
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		direct = sql.OpenDB(conn)
	}
	t.Cleanup(func() { direct.Close() })
	ddl, err := txretry.IdempotencyKeysDDL(keyTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		ddl,
		"CREATE TABLE crash_accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
		// Not unique: a request applied twice shows as two rows.
		"CREATE TABLE crash_ledger (req INT NOT NULL, src INT NOT NULL, dst INT NOT NULL, amount BIGINT NOT NULL, round INT NOT NULL)",
		"CREATE INDEX crash_ledger_req ON crash_ledger (req)",
	} {
		if _, err := direct.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for a := range accounts {
		if _, err := direct.Exec(fmt.Sprintf("INSERT INTO crash_accounts (id, balance) VALUES (%d, %d)", a, initialBalance)); err != nil {
			t.Fatal(err)
		}
	}
	proxy := faultproxy.StartPartition(t, upstream, map[bool]faultproxy.Protocol{true: faultproxy.Postgres, false: faultproxy.MySQL}[pg])
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("crash-%s-%x", path, rand.Uint32())
	env := append(os.Environ(), envChild+"="+path, envDSN+"="+dsn, envProxy+"="+proxy.Addr(), envPrefix+"="+prefix)

	var c tally
	answers := map[int][]answer{}
	handed := map[int]int{} // how often each request was handed to a child
	var pending []int
	next := 0
	target := wantKills(t)
	deadline := time.Now().Add(time.Duration(target)*time.Second + 2*time.Minute)
	for round := 1; c.kills < target; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d kills of %d before the campaign's deadline", c.kills, target)
		}
		// The oldest unanswered requests first, new ones to fill the batch.
		old := min(len(pending), batch-newPerRound)
		reqs := slices.Clone(pending[:old])
		for len(reqs) < batch {
			reqs = append(reqs, next)
			next++
		}
		stallMode := rand.IntN(2) == 0
		killed, stalledAtKill := runChild(t, bin, env, round, reqs, proxy, stallMode, true, answers)
		c.rounds++
		if killed {
			c.kills++
			if stalledAtKill {
				c.commitKills++
			}
		}
		pending = append(stillPending(round, reqs, answers, handed, &c), pending[old:]...)
	}
	// Finish: re-submit what is left, without faults or kills.
	for round := c.rounds + 1; len(pending) > 0; round++ {
		if round > c.rounds+5 {
			t.Fatalf("%d requests still unanswered after 5 rounds without kills", len(pending))
		}
		runChild(t, bin, env, round, pending, proxy, false, false, answers)
		pending = stillPending(round, pending, answers, handed, &c)
	}
	c.requests = next
	check(t, direct, &c, answers)
	t.Logf("%s: %d kills (%d with a COMMIT in flight) in %d rounds; %d requests, %d submissions, %d re-submissions answered; "+
		"%d of them re-submissions of applied requests, %d of those ErrAlreadyCommitted; "+
		"%d requests applied by a killed child before it answered; "+
		"%d error answers (re-submitted); %d anomalies",
		path, c.kills, c.commitKills, c.rounds, c.requests, c.submissions, c.resubmissions,
		c.resubmittedAfterApplied, c.alreadyAnswers, c.appliedUnanswered, c.errAnswer, len(c.anomalies))
	for _, a := range c.anomalies {
		t.Error(a)
	}
}

// stillPending counts the submissions of reqs in round and returns those
// without a final answer (ok or already committed).
func stillPending(round int, reqs []int, answers map[int][]answer, handed map[int]int, c *tally) []int {
	var left []int
	for _, i := range reqs {
		handed[i]++
		c.submissions++
		final := false
		for _, a := range answers[i] {
			if a.kind != "err" {
				final = true
			}
			if a.round == round && handed[i] > 1 {
				c.resubmissions++ // answered re-submissions only
			}
		}
		if !final {
			left = append(left, i)
		}
	}
	return left
}

// runChild runs one child on reqs and records its answers. With kill, it
// sends SIGKILL once the child is at work: after a COMMIT's reply was
// stalled at the proxy (stallMode), or after a random pause. killed
// reports that the child was still running when killed.
func runChild(t *testing.T, bin string, env []string, round int, reqs []int, proxy *faultproxy.Proxy, stallMode, kill bool, answers map[int][]answer) (killed, stalledAtKill bool) {
	t.Helper()
	var stalled atomic.Bool
	stallAt := int64(1 + rand.IntN(6))
	var commits atomic.Int64
	if kill {
		proxy.SetPolicy(func(_, _ int) faultproxy.Fault {
			n := commits.Add(1)
			switch r := rand.Float64(); {
			case stallMode && n == stallAt:
				stalled.Store(true)
				return faultproxy.StallReply
			case r < 0.03:
				return faultproxy.DropAfterCommit
			case r < 0.06:
				return faultproxy.DropBeforeCommit
			}
			return faultproxy.None
		})
	}
	defer func() {
		proxy.SetPolicy(nil)
		proxy.Release()
	}()
	strs := make([]string, len(reqs))
	for k, i := range reqs {
		strs[k] = strconv.Itoa(i)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(slices.Clone(env), envRound+"="+strconv.Itoa(round), envReqs+"="+strings.Join(strs, ","))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	done := false
	record := func(line string) {
		f := strings.Fields(line)
		switch {
		case len(f) == 1 && f[0] == "done":
			done = true
		case len(f) == 3 && f[0] == "res":
			i, err := strconv.Atoi(f[1])
			if err == nil {
				answers[i] = append(answers[i], answer{round: round, kind: f[2]})
			}
		}
	}
	// Wait for the child to be at work.
	timeout := time.After(30 * time.Second)
	for ready := false; !ready; {
		select {
		case line, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("round %d: the child ended before it was ready: %s", round, stderr.String())
			}
			ready = line == "ready"
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatalf("round %d: the child is not ready after 30 s", round)
		}
	}
	var killAt <-chan time.Time
	if kill && !stallMode {
		killAt = time.After(time.Duration(rand.IntN(80)) * time.Millisecond)
	}
	poll := time.NewTicker(time.Millisecond)
	defer poll.Stop()
	limit := time.After(60 * time.Second)
loop:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break loop
			}
			record(line)
		case <-killAt:
			break loop
		case <-poll.C:
			if kill && stallMode && stalled.Load() {
				// The COMMIT went to the server; its reply is held.
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				stalledAtKill = true
				break loop
			}
		case <-limit:
			_ = cmd.Process.Kill()
			t.Fatalf("round %d: the child did not finish within 60 s", round)
		}
	}
	if kill && !done {
		if err := cmd.Process.Signal(syscall.SIGKILL); err == nil {
			killed = true
		}
	}
	for line := range lines {
		record(line)
	}
	err = cmd.Wait()
	if !killed && (err != nil || !done) {
		t.Fatalf("round %d: child: %v, done=%v: %s", round, err, done, stderr.String())
	}
	if killed && done {
		killed = false // it had finished before the signal
		stalledAtKill = false
	}
	return killed, stalledAtKill && killed
}

// check compares the database with the requests and the answers.
func check(t *testing.T, db *sql.DB, c *tally, answers map[int][]answer) {
	t.Helper()
	ctx := context.Background()
	applied := map[int]int{} // request → round that applied it
	rows, err := db.QueryContext(ctx, "SELECT req, COUNT(*), MIN(round) FROM crash_ledger GROUP BY req")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var req, n, round int
		if err := rows.Scan(&req, &n, &round); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			c.anomaly("request %d applied %d times", req, n)
		}
		applied[req] = round
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	want := make([]int64, accounts)
	for a := range want {
		want[a] = initialBalance
	}
	for i := range c.requests {
		want[from(i)] -= amount(i)
		want[to(i)] += amount(i)
		ra, ok := applied[i]
		if !ok {
			c.anomaly("request %d never applied", i)
			continue
		}
		answeredInRound := false
		for _, a := range answers[i] {
			switch {
			case a.kind == "err":
				c.errAnswer++
				if a.round > ra {
					c.resubmittedAfterApplied++
					c.anomaly("request %d: re-submission in round %d, after round %d applied it, answered with an error", i, a.round, ra)
				}
			case a.round < ra:
				c.anomaly("request %d answered %s in round %d, before round %d applied it", i, a.kind, a.round, ra)
			case a.round == ra:
				answeredInRound = true
				if a.kind != "ok" {
					c.anomaly("request %d answered %s by the round that applied it", i, a.kind)
				}
			default:
				c.resubmittedAfterApplied++
				if a.kind == "already" {
					c.alreadyAnswers++
				} else {
					c.anomaly("request %d: re-submission in round %d, after round %d applied it, answered %s", i, a.round, ra, a.kind)
				}
			}
		}
		if !answeredInRound {
			c.appliedUnanswered++
		}
	}
	for a := range accounts {
		var b int64
		if err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT balance FROM crash_accounts WHERE id = %d", a)).Scan(&b); err != nil {
			t.Fatal(err)
		}
		if b != want[a] {
			c.anomaly("account %d: balance %d, want %d from the requests", a, b, want[a])
		}
	}
	var keys int
	// Each committed call also stored its marker, '@' and random digits,
	// beside its key.
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+keyTable+" WHERE token NOT LIKE '@%'").Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if keys != c.requests {
		c.anomaly("%d keys committed for %d requests", keys, c.requests)
	}
}
