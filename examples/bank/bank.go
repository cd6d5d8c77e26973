package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// config is what one burst of transfers looks like.
type config struct {
	workers     int           // concurrent callers
	transfers   int           // transfers per worker
	accounts    int           // accounts the money moves among
	balance     int64         // opening balance of every account
	maxAmount   int64         // transfers move 1..maxAmount
	deadline    time.Duration // per call
	maxAttempts int           // txretry.WithMaxAttempts
}

// errInsufficientFunds declines a transfer: a business outcome, returned by
// fn and therefore not retried.
var errInsufficientFunds = errors.New("insufficient funds")

// Driver names a way of reaching a server.
type driver string

// The drivers the demo runs.
const (
	pgxNative driver = "pgx native, pgxretry.RunInTx"
	pgxStdlib driver = "pgx stdlib (database/sql), txretry.RunInTx"
	mysqlSQL  driver = "go-sql-driver/mysql (database/sql), txretry.RunInTx"
)

// driversFor lists the drivers to run on a server of engine e.
func driversFor(e dbserver.Engine) []driver {
	if e == dbserver.Postgres {
		return []driver{pgxNative, pgxStdlib}
	}
	return []driver{mysqlSQL}
}

// tables are the demo's table names in its namespace.
type tables struct {
	accounts, transfers string
}

// statements is the SQL of the demo, written with ? placeholders and
// rebound per engine.
type statements struct {
	drop        []string
	create      []string
	openAccount string
	balance     string
	debit       string
	credit      string
	record      string
	sum         string
	ledger      string
	balances    string
}

// newStatements returns the demo's SQL for engine e and tables t. The table
// names are identifiers chosen by the program, never input.
func newStatements(e dbserver.Engine, t tables) statements {
	r := e.Rebind
	return statements{
		drop: []string{
			"DROP TABLE IF EXISTS " + t.transfers,
			"DROP TABLE IF EXISTS " + t.accounts,
		},
		create: []string{
			"CREATE TABLE " + t.accounts + " (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
			"CREATE TABLE " + t.transfers + ` (
				id BIGINT PRIMARY KEY,
				from_id INT NOT NULL,
				to_id INT NOT NULL,
				amount BIGINT NOT NULL)`,
		},
		openAccount: r("INSERT INTO " + t.accounts + " (id, balance) VALUES (?, ?)"),
		balance:     r("SELECT balance FROM " + t.accounts + " WHERE id = ?"),
		debit:       r("UPDATE " + t.accounts + " SET balance = balance - ? WHERE id = ?"),
		credit:      r("UPDATE " + t.accounts + " SET balance = balance + ? WHERE id = ?"),
		record:      r("INSERT INTO " + t.transfers + " (id, from_id, to_id, amount) VALUES (?, ?, ?, ?)"),
		sum:         "SELECT COALESCE(SUM(balance), 0), COUNT(*) FROM " + t.accounts,
		ledger:      "SELECT id, from_id, to_id, amount FROM " + t.transfers,
		balances:    "SELECT id, balance FROM " + t.accounts,
	}
}

// transfer is one transfer to make. Its id is chosen before the call, so
// that every attempt of the call writes the same transfer row.
type transfer struct {
	id       int64
	from, to int
	amount   int64
}

// querier is the part of a transaction the transfer needs; it hides whether
// the transaction is a *sql.Tx or a pgx.Tx, so that the transfer is written
// once.
type querier interface {
	exec(ctx context.Context, query string, args ...any) error
	scanRow(ctx context.Context, query string, args []any, dest ...any) error
}

// sqlTx adapts *sql.Tx.
type sqlTx struct{ tx *sql.Tx }

func (q sqlTx) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.ExecContext(ctx, query, args...)
	return err
}

func (q sqlTx) scanRow(ctx context.Context, query string, args []any, dest ...any) error {
	return q.tx.QueryRowContext(ctx, query, args...).Scan(dest...)
}

// pgxTx adapts pgx.Tx.
type pgxTx struct{ tx pgx.Tx }

func (q pgxTx) exec(ctx context.Context, query string, args ...any) error {
	_, err := q.tx.Exec(ctx, query, args...)
	return err
}

func (q pgxTx) scanRow(ctx context.Context, query string, args []any, dest ...any) error {
	return q.tx.QueryRow(ctx, query, args...).Scan(dest...)
}

// move is the body of a transfer, run by RunInTx: read the payer's balance,
// decline if it is too low, otherwise move the money and record the
// transfer. Under SERIALIZABLE, concurrent transfers that read and write the
// same accounts are aborted by the database, and RunInTx runs them again.
func (s statements) move(ctx context.Context, q querier, t transfer) error {
	var balance int64
	if err := q.scanRow(ctx, s.balance, []any{t.from}, &balance); err != nil {
		return err
	}
	if balance < t.amount {
		return errInsufficientFunds
	}
	if err := q.exec(ctx, s.debit, t.amount, t.from); err != nil {
		return err
	}
	if err := q.exec(ctx, s.credit, t.amount, t.to); err != nil {
		return err
	}
	return q.exec(ctx, s.record, t.id, t.from, t.to, t.amount)
}

// transferFunc runs one transfer with RunInTx and the given options.
type transferFunc func(ctx context.Context, t transfer, opts ...txretry.Option) error

// bank is one run of the demo on one server with one driver.
type bank struct {
	srv    *dbserver.Server
	driver driver
	ns     dbserver.Namespace
	sql    statements
	db     *sql.DB       // setup and checks, and the transfers for the database/sql drivers
	pool   *pgxpool.Pool // the transfers for pgx native
	run    transferFunc
}

// openBank connects to srv's namespace with driver d. Close it with close.
func openBank(ctx context.Context, srv *dbserver.Server, ns dbserver.Namespace, d driver, workers int) (*bank, error) {
	b := &bank{
		srv: srv, driver: d, ns: ns,
		sql: newStatements(srv.Engine, tables{accounts: ns.Table("bank_accounts"), transfers: ns.Table("bank_transfers")}),
	}
	db, err := sql.Open(srv.Engine.Driver(), ns.DSN)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(workers)
	db.SetMaxIdleConns(workers)
	b.db = db

	serializable := txretry.WithIsolation(sql.LevelSerializable)
	b.run = func(ctx context.Context, t transfer, opts ...txretry.Option) error {
		return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			return b.sql.move(ctx, sqlTx{tx}, t)
		}, append(opts, serializable)...)
	}
	if d == pgxNative {
		cfg, err := pgxpool.ParseConfig(ns.DSN)
		if err != nil {
			return nil, errors.Join(err, db.Close())
		}
		cfg.MaxConns = int32(workers)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, errors.Join(err, db.Close())
		}
		b.pool = pool
		b.run = func(ctx context.Context, t transfer, opts ...txretry.Option) error {
			return pgxretry.RunInTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
				return b.sql.move(ctx, pgxTx{tx}, t)
			}, append(opts, serializable)...)
		}
	}
	return b, nil
}

// close closes the pools.
func (b *bank) close() error {
	if b.pool != nil {
		b.pool.Close()
	}
	return b.db.Close()
}

// setup drops and creates the tables and opens the accounts.
func (b *bank) setup(ctx context.Context, cfg config) error {
	for _, stmt := range append(slices.Clone(b.sql.drop), b.sql.create...) {
		if _, err := b.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("set up tables: %w", err)
		}
	}
	for id := 1; id <= cfg.accounts; id++ {
		if _, err := b.db.ExecContext(ctx, b.sql.openAccount, id, cfg.balance); err != nil {
			return fmt.Errorf("open account: %w", err)
		}
	}
	return nil
}

// report is what one run found.
type report struct {
	server    string
	driver    driver
	where     string
	calls     int
	committed int
	declined  int
	failed    map[string]int // failed calls by txretry.Describe of the error
	uncertain int
	attempts  int
	retryable map[string]int // retryable attempt errors by SQLSTATE or error number
	elapsed   time.Duration
	invariant invariant
}

// counter is the observer of a run: it counts attempts and the retryable
// errors of failed attempts by code. Events carry codes and types, never
// messages or arguments.
type counter struct {
	mu        sync.Mutex
	attempts  int
	retryable map[string]int
}

// Observe implements txretry.Observer.
func (c *counter) Observe(_ context.Context, e txretry.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case e.Kind == txretry.AttemptStarted:
		c.attempts++
	case e.Kind == txretry.AttemptFailed && e.Class == txretry.Retryable:
		code := e.Code
		if code == "" {
			code = e.ErrType
		}
		c.retryable[code]++
	}
}

// outcome is how the calls of one worker ended.
type outcome struct {
	committed []int64
	uncertain []int64
	declined  int
	failed    map[string]int
}

// burst runs cfg.workers workers, each making cfg.transfers random transfers
// one after the other, and reports how they ended.
func (b *bank) burst(ctx context.Context, cfg config, obs *counter) ([]outcome, time.Duration) {
	opts := []txretry.Option{
		txretry.WithLabel("transfer"),
		txretry.WithObserver(obs),
		txretry.WithMaxAttempts(cfg.maxAttempts),
	}
	outcomes := make([]outcome, cfg.workers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range cfg.workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 42))
			out := outcome{failed: map[string]int{}}
			for i := range cfg.transfers {
				if ctx.Err() != nil {
					break
				}
				t := transfer{
					id:     int64(w*cfg.transfers + i + 1),
					from:   1 + rnd.IntN(cfg.accounts),
					amount: 1 + rnd.Int64N(cfg.maxAmount),
				}
				t.to = 1 + (t.from+rnd.IntN(cfg.accounts-1))%cfg.accounts // never t.from
				callCtx, cancel := context.WithTimeout(ctx, cfg.deadline)
				err := b.run(callCtx, t, opts...)
				cancel()
				switch {
				case err == nil:
					out.committed = append(out.committed, t.id)
				case errors.Is(err, errInsufficientFunds):
					out.declined++
				case errors.Is(err, txretry.ErrCommitUncertain):
					out.uncertain = append(out.uncertain, t.id)
				default:
					out.failed[describeFailure(err)]++
				}
			}
			outcomes[w] = out
		})
	}
	wg.Wait()
	return outcomes, time.Since(start)
}

// runBank runs the demo once on srv with driver d, in namespace ns.
func runBank(ctx context.Context, srv *dbserver.Server, ns dbserver.Namespace, d driver, cfg config) (report, error) {
	rep := report{server: srv.String(), driver: d, where: ns.Where, failed: map[string]int{}}
	b, err := openBank(ctx, srv, ns, d, cfg.workers)
	if err != nil {
		return rep, err
	}
	defer b.close()
	if err := b.setup(ctx, cfg); err != nil {
		return rep, err
	}

	obs := &counter{retryable: map[string]int{}}
	outcomes, elapsed := b.burst(ctx, cfg, obs)
	rep.elapsed = elapsed
	rep.attempts = obs.attempts
	rep.retryable = obs.retryable

	var committed, uncertain []int64
	for _, o := range outcomes {
		committed = append(committed, o.committed...)
		uncertain = append(uncertain, o.uncertain...)
		rep.declined += o.declined
		for k, n := range o.failed {
			rep.failed[k] += n
			rep.calls += n
		}
	}
	rep.committed, rep.uncertain = len(committed), len(uncertain)
	rep.calls += rep.committed + rep.uncertain + rep.declined

	inv, err := b.check(ctx, cfg, committed, uncertain)
	rep.invariant = inv
	return rep, err
}

// invariant is the result of the checks after a burst.
type invariant struct {
	total, want int64    // sum of the balances, and what it must be
	problems    []string // what is wrong, if anything
}

// ok reports whether every check passed.
func (inv invariant) ok() bool { return len(inv.problems) == 0 }

// check verifies the invariants:
//   - the sum of the balances is what the accounts were opened with;
//   - every transfer reported committed is in the transfers table, and
//     every other one is not (a call that failed left no trace), except
//     the uncertain ones, which may be either;
//   - each account's balance is its opening balance plus what the recorded
//     transfers brought in minus what they took out, so no transfer was
//     applied twice or in part.
func (b *bank) check(ctx context.Context, cfg config, committed, uncertain []int64) (invariant, error) {
	inv := invariant{want: int64(cfg.accounts) * cfg.balance}
	var count int
	if err := b.db.QueryRowContext(ctx, b.sql.sum).Scan(&inv.total, &count); err != nil {
		return inv, fmt.Errorf("sum balances: %w", err)
	}
	if inv.total != inv.want || count != cfg.accounts {
		inv.problems = append(inv.problems, fmt.Sprintf("total balance %d over %d accounts, want %d over %d",
			inv.total, count, inv.want, cfg.accounts))
	}

	expect := map[int64]bool{} // id → must be present (true) or may be (false)
	for _, id := range committed {
		expect[id] = true
	}
	for _, id := range uncertain {
		expect[id] = false
	}
	want := map[int]int64{} // account → expected balance from the ledger
	for id := 1; id <= cfg.accounts; id++ {
		want[id] = cfg.balance
	}
	rows, err := b.db.QueryContext(ctx, b.sql.ledger)
	if err != nil {
		return inv, fmt.Errorf("read transfers: %w", err)
	}
	seen := map[int64]bool{}
	unexpected := 0
	for rows.Next() {
		var t transfer
		if err := rows.Scan(&t.id, &t.from, &t.to, &t.amount); err != nil {
			return inv, errors.Join(fmt.Errorf("read transfers: %w", err), rows.Close())
		}
		seen[t.id] = true
		if _, ok := expect[t.id]; !ok {
			unexpected++
		}
		want[t.from] -= t.amount
		want[t.to] += t.amount
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return inv, fmt.Errorf("read transfers: %w", err)
	}
	missing := 0
	for id, must := range expect {
		if must && !seen[id] {
			missing++
		}
	}
	if missing > 0 {
		inv.problems = append(inv.problems, fmt.Sprintf("%d transfers reported committed are missing", missing))
	}
	if unexpected > 0 {
		inv.problems = append(inv.problems, fmt.Sprintf("%d transfers recorded although their calls failed", unexpected))
	}

	balances, err := b.db.QueryContext(ctx, b.sql.balances)
	if err != nil {
		return inv, fmt.Errorf("read balances: %w", err)
	}
	mismatched := 0
	for balances.Next() {
		var id int
		var balance int64
		if err := balances.Scan(&id, &balance); err != nil {
			return inv, errors.Join(fmt.Errorf("read balances: %w", err), balances.Close())
		}
		if balance != want[id] || balance < 0 {
			mismatched++
		}
	}
	if err := errors.Join(balances.Err(), balances.Close()); err != nil {
		return inv, fmt.Errorf("read balances: %w", err)
	}
	if mismatched > 0 {
		inv.problems = append(inv.problems, fmt.Sprintf("%d accounts do not match their transfers", mismatched))
	}
	return inv, nil
}

// describeFailure renders the error of a failed call without row data, for
// grouping: why retrying stopped, if it did, and the last database error.
// txretry.Describe alone would name only the database error.
func describeFailure(err error) string {
	if re, ok := errors.AsType[*txretry.RetryError](err); ok {
		return fmt.Sprintf("retries stopped (%s), last error %s", re.Reason, txretry.Describe(re.Err))
	}
	return txretry.Describe(err)
}

// sortedKeys returns m's keys in order, for stable output.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
