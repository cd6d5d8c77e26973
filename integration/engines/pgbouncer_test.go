package engines

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// bouncer is the test's database, reached directly and through PgBouncer.
type bouncer struct {
	// direct is a pgx DSN of the database on the PostgreSQL server, for
	// setup and for checks that must not go through PgBouncer.
	direct string
	// url is a pgx URL of the same database through PgBouncer, without a
	// query exec mode.
	url *url.URL
}

// newBouncer creates a database for the test on the server of
// TXRETRY_PG_DSN (dbservertest) and returns it with its URL through the PgBouncer
// of TXRETRY_PGBOUNCER_DSN, whose wildcard database entry forwards any
// database name to that server.
func newBouncer(t *testing.T) *bouncer {
	t.Helper()
	raw := requireEnv(t, envPgBouncerDSN, "pgbouncer.sh")
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL: %v", envPgBouncerDSN, err)
	}
	direct := dbservertest.Postgres(t)
	cfg, err := pgconn.ParseConfig(direct)
	if err != nil {
		t.Fatalf("dbservertest DSN: %v", err)
	}
	u.Path = "/" + cfg.Database
	return &bouncer{direct: direct, url: u}
}

// dsn returns the URL through PgBouncer with extra query parameters
// (key, value pairs), for example "default_query_exec_mode", "exec".
func (b *bouncer) dsn(kv ...string) string {
	u := *b.url
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// via returns the URL through addr (a fault proxy in front of PgBouncer).
func (b *bouncer) via(addr string, kv ...string) string {
	u, _ := url.Parse(b.dsn(kv...))
	u.Host = addr
	return u.String()
}

// exec runs statements directly on the server.
func (b *bouncer) exec(t *testing.T, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.direct)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("setup: %v", err)
		}
	}
}

// createBank creates accounts 1..n with balance each, and the marker table.
func (b *bouncer) createBank(t *testing.T, n int, balance int64) {
	t.Helper()
	b.exec(t,
		"CREATE TABLE accounts (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
		fmt.Sprintf("INSERT INTO accounts SELECT g, %d FROM generate_series(1, %d) g", balance, n),
		mustDDL(t))
}

// balances reads the balances directly from the server.
func (b *bouncer) balances(t *testing.T) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.direct)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, "SELECT balance FROM accounts ORDER BY id")
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatalf("read balances: %v", err)
	}
	return out
}

// count returns the number of rows of table, read directly.
func (b *bouncer) count(t *testing.T, table string) int {
	t.Helper()
	return b.scalar(t, "SELECT count(*) FROM "+table)
}

// scalar returns the integer query returns, read directly from the server.
func (b *bouncer) scalar(t *testing.T, query string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.direct)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// runner runs one transfer as a transaction through PgBouncer, with one of
// the two adapters.
type runner func(ctx context.Context, m transfer, opts ...txretry.Option) error

// pgxRunner opens a pgxpool on dsn and runs transfers with pgxretry: each
// reads both balances and writes them back, so that concurrent transfers
// conflict under SERIALIZABLE.
func pgxRunner(t *testing.T, dsn string) runner {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgxpool: %v", err)
	}
	t.Cleanup(pool.Close)
	return func(ctx context.Context, m transfer, opts ...txretry.Option) error {
		return pgxretry.RunInTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			var from, to int64
			if err := tx.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", m.from).Scan(&from); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", m.to).Scan(&to); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = $1 WHERE id = $2", from-m.amount, m.from); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE accounts SET balance = $1 WHERE id = $2", to+m.amount, m.to)
			return err
		}, opts...)
	}
}

// stdlibRunner opens pgx's database/sql driver on dsn and runs the same
// transfers with txretry.
func stdlibRunner(t *testing.T, dsn string) runner {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return func(ctx context.Context, m transfer, opts ...txretry.Option) error {
		return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			var from, to int64
			if err := tx.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = $1", m.from).Scan(&from); err != nil {
				return err
			}
			if err := tx.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = $1", m.to).Scan(&to); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = $1 WHERE id = $2", from-m.amount, m.from); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = $1 WHERE id = $2", to+m.amount, m.to)
			return err
		}, opts...)
	}
}

// adapters are the two ways to run transactions through PgBouncer.
var adapters = []struct {
	name string
	open func(t *testing.T, dsn string) runner
}{
	{"pgx", pgxRunner},
	{"stdlib", stdlibRunner},
}

// TestPgBouncerDefaultModeFails shows why PgBouncer in transaction pooling
// mode needs a pgx query exec mode other than the default: pgx's statement
// cache prepares named statements ("stmtcache_<hash>") on whatever server
// connection PgBouncer lends, so a second client connection that lands on
// the same server connection gets 42P05 (prepared statement already exists),
// or a client whose statement lives on another server connection gets 26000
// (prepared statement does not exist). These errors are permanent for
// txretry: the call fails without retrying.
func TestPgBouncerDefaultModeFails(t *testing.T) {
	checkLeaks(t)
	b := newBouncer(t)
	b.createBank(t, 2, 1000)
	for _, ad := range adapters {
		t.Run(ad.name, func(t *testing.T) {
			// Two client connections, used one after the other: PgBouncer
			// lends them the same (only) server connection.
			var runs []runner
			for range 2 {
				runs = append(runs, ad.open(t, b.dsn()))
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			codes := map[string]int{}
			var failed error
			for i := range 10 {
				err := runs[i%2](ctx, transfer{from: 1, to: 2, amount: 1}, txretry.WithIsolation(sql.LevelSerializable))
				if err != nil {
					codes[pgerr.SQLState(err)]++
					failed = err
				}
			}
			t.Logf("errors by SQLSTATE over 10 calls: %v (last: %v)", codes, failed)
			if codes["42P05"]+codes["26000"] == 0 {
				t.Errorf("no 42P05/26000 with pgx's default statement cache through PgBouncer; errors: %v", codes)
			}
		})
	}
}

// TestPgBouncerBankSerializable runs concurrent read-modify-write transfers
// under SERIALIZABLE through PgBouncer in transaction pooling mode, with the
// query exec modes that work there, with both adapters: serialization
// failures (40001) are retried and every transfer is applied exactly once.
func TestPgBouncerBankSerializable(t *testing.T) {
	checkLeaks(t)
	modes := []struct {
		adapter int // index in adapters
		mode    string
	}{
		{0, "exec"},
		{0, "cache_describe"},
		{0, "simple_protocol"},
		{1, "exec"},
		{1, "simple_protocol"},
	}
	for _, m := range modes {
		ad := adapters[m.adapter]
		t.Run(ad.name+"/"+m.mode, func(t *testing.T) {
			b := newBouncer(t)
			const (
				accounts   = 5
				initial    = 1000
				workers    = 8
				perWorker  = 10
				maxRounds  = 3
				serialFail = "40001"
			)
			b.createBank(t, accounts, initial)
			run := ad.open(t, b.dsn("default_query_exec_mode", m.mode))
			want := slices.Repeat([]int64{initial}, accounts)
			obs := newCounter()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for round := 1; round <= maxRounds; round++ {
				var (
					wg    sync.WaitGroup
					mu    sync.Mutex
					moves []transfer
				)
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rnd := rand.New(rand.NewPCG(uint64(round), uint64(w)))
						for range perWorker {
							from := 1 + rnd.IntN(accounts)
							mv := transfer{from: from, to: 1 + (from+rnd.IntN(accounts-1))%accounts, amount: 1 + rnd.Int64N(10)}
							err := run(ctx, mv,
								txretry.WithIsolation(sql.LevelSerializable),
								txretry.WithMaxAttempts(100),
								txretry.WithTimeBudget(time.Minute),
								txretry.WithObserver(obs))
							if err != nil {
								t.Errorf("transfer: %s", errChain(err))
								continue
							}
							mu.Lock()
							moves = append(moves, mv)
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				apply(want, moves)
				t.Logf("round %d: %d transfers committed; %s", round, len(moves), obs)
				if t.Failed() || obs.failed(serialFail) > 0 {
					break
				}
			}
			if obs.failed(serialFail) == 0 {
				t.Errorf("no serialization failure (40001): the test did not produce conflicts")
			}
			if got := b.balances(t); !slices.Equal(got, want) {
				t.Errorf("balances %v, want %v", got, want)
			}
		})
	}
}

// TestPgBouncerVerifiers runs both built-in verifiers through PgBouncer:
// calls that commit normally (the verifiers' step before COMMIT runs through
// the pooler), then commits lost on purpose by a fault proxy in front of
// PgBouncer, before the COMMIT reached it (not committed: re-run once) and
// after PostgreSQL answered it (committed: no re-run). The verification
// itself runs through PgBouncer on another client connection, so it may be
// served by another server connection: both verifiers work there, since
// pg_xact_status and the marker's unique key are not session state.
func TestPgBouncerVerifiers(t *testing.T) {
	checkLeaks(t)
	verifiers := []struct {
		name string
		opt  txretry.Option
	}{
		{"xact-status", txretry.WithXactStatusVerification()},
		{"commit-marker", txretry.WithCommitMarker(markerTable)},
	}
	faults := []struct {
		fault        faultproxy.Fault
		wantVerdict  txretry.Verification
		wantAttempts int
	}{
		{faultproxy.None, 0, 1},
		{faultproxy.DropBeforeCommit, txretry.VerifiedNotCommitted, 2},
		{faultproxy.DropAfterCommit, txretry.VerifiedCommitted, 1},
	}
	for _, ad := range adapters {
		for _, v := range verifiers {
			t.Run(ad.name+"/"+v.name, func(t *testing.T) {
				b := newBouncer(t)
				b.createBank(t, 2, 1000)
				proxy, err := faultproxy.Start(b.url.Host, faultproxy.Postgres)
				if err != nil {
					t.Fatalf("faultproxy: %v", err)
				}
				t.Cleanup(func() { proxy.Close() })
				// A real partition would also stop pgx's cancel request.
				proxy.BlockCancelRequests(true)
				run := ad.open(t, b.via(proxy.Addr(), "default_query_exec_mode", "exec"))

				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				transfers := 0
				for _, f := range faults {
					for range 3 {
						obs := newCounter()
						proxy.Arm(f.fault)
						err := run(ctx, transfer{from: 1, to: 2, amount: 1}, v.opt,
							txretry.WithObserver(obs), txretry.WithVerifyTimeout(20*time.Second))
						if err != nil {
							t.Fatalf("%v: %s; %s", f.fault, errChain(err), obs)
						}
						transfers++
						if f.wantVerdict != 0 && obs.verifications(f.wantVerdict) != 1 {
							t.Errorf("%v: %s; want one %v verification", f.fault, obs, f.wantVerdict)
						}
						if got := obs.attempts(); got != f.wantAttempts {
							t.Errorf("%v: %d attempts, want %d; %s", f.fault, got, f.wantAttempts, obs)
						}
						if got, want := b.balances(t), []int64{1000 - int64(transfers), 1000 + int64(transfers)}; !slices.Equal(got, want) {
							t.Fatalf("%v: balances %v, want %v (every transfer exactly once)", f.fault, got, want)
						}
					}
				}
				if st := proxy.Stats(); st.Faults[faultproxy.DropBeforeCommit] != 3 || st.Faults[faultproxy.DropAfterCommit] != 3 {
					t.Errorf("proxy stats %+v: not every fault was injected", st)
				}
				if v.name == "commit-marker" {
					// One marker per committed transaction.
					if got := b.count(t, markerTable); got != transfers {
						t.Errorf("%d markers, want %d", got, transfers)
					}
				}
			})
		}
	}
}
