package crash

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txretry/txretry/integration/internal/pqconn"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// The child's environment, set by the parent.
const (
	envChild  = "TXRETRY_CRASH_CHILD" // the driver path: pgx, pgx-stdlib, pq or mysql
	envDSN    = "TXRETRY_CRASH_DSN"   // the database, reached through envProxy
	envProxy  = "TXRETRY_CRASH_PROXY" // host:port of the fault proxy
	envRound  = "TXRETRY_CRASH_ROUND" // the child's number, written in the ledger
	envReqs   = "TXRETRY_CRASH_REQS"  // the requests to submit, comma-separated
	envPrefix = "TXRETRY_CRASH_KEYS"  // the prefix of the requests' keys
)

const (
	accounts       = 8
	initialBalance = 1_000_000
	keyTable       = "crash_keys"
	childWorkers   = 3
)

// request i moves amount(i) from account from(i) to to(i), under key(i).
func from(i int) int     { return i % accounts }
func to(i int) int       { return (from(i) + 1 + (i/accounts)%(accounts-1)) % accounts }
func amount(i int) int64 { return int64(1 + i%20) }

func key(prefix string, i int) string { return prefix + "-" + strconv.Itoa(i) }

// execFn runs one statement of fn, PostgreSQL placeholders rewritten for MySQL.
type execFn func(ctx context.Context, q string, args ...any) error

type childRunner func(ctx context.Context, fn func(ctx context.Context, x execFn) error, opts ...txretry.Option) error

// childMain is the child process: it submits its requests with a few
// workers and prints one line per answer, "res <request> <answer>", where
// answer is ok (also after its own COMMIT was lost and its key's probe
// found it committed), already (ErrAlreadyCommitted: another call
// committed the key) or err.
func childMain() int {
	path, dsn, proxy := os.Getenv(envChild), os.Getenv(envDSN), os.Getenv(envProxy)
	round, _ := strconv.Atoi(os.Getenv(envRound))
	prefix := os.Getenv(envPrefix)
	var reqs []int
	for f := range strings.SplitSeq(os.Getenv(envReqs), ",") {
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad request list:", err)
			return 2
		}
		reqs = append(reqs, n)
	}
	run, mysqlPlaceholders, closeFn, err := openChild(path, dsn, proxy)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	defer closeFn()
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	say := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		out.WriteString(line + "\n")
		out.Flush() // one write per line: a kill loses whole lines only
	}
	say("ready")
	rebind := func(q string) string {
		if !mysqlPlaceholders {
			return q
		}
		for i := 5; i >= 1; i-- {
			q = strings.ReplaceAll(q, "$"+strconv.Itoa(i), "?")
		}
		return q
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for range childWorkers {
		wg.Go(func() {
			for i := range work {
				err := run(context.Background(), func(ctx context.Context, x execFn) error {
					if err := x(ctx, rebind("UPDATE crash_accounts SET balance = balance - $1 WHERE id = $2"), amount(i), from(i)); err != nil {
						return err
					}
					if err := x(ctx, rebind("UPDATE crash_accounts SET balance = balance + $1 WHERE id = $2"), amount(i), to(i)); err != nil {
						return err
					}
					return x(ctx, rebind("INSERT INTO crash_ledger (req, src, dst, amount, round) VALUES ($1, $2, $3, $4, $5)"),
						i, from(i), to(i), amount(i), round)
				}, txretry.WithIdempotencyKey(keyTable, key(prefix, i)),
					txretry.WithCommitTimeout(2*time.Second), txretry.WithVerifyTimeout(15*time.Second))
				answer := "err"
				switch {
				case err == nil:
					answer = "ok"
				case errors.Is(err, txretry.ErrAlreadyCommitted):
					answer = "already"
				}
				say(fmt.Sprintf("res %d %s", i, answer))
			}
		})
	}
	for _, i := range reqs {
		work <- i
	}
	close(work)
	wg.Wait()
	say("done")
	return 0
}

// openChild opens the child's driver path through the proxy.
func openChild(path, dsn, proxy string) (run childRunner, mysqlPlaceholders bool, closeFn func(), err error) {
	host, portS, err := net.SplitHostPort(proxy)
	if err != nil {
		return nil, false, nil, err
	}
	switch path {
	case "pgx", "pgx-stdlib", "pq":
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, false, nil, err
		}
		port, _ := strconv.Atoi(portS)
		cfg.Host, cfg.Port, cfg.Fallbacks = host, uint16(port), nil
		switch path {
		case "pgx-stdlib":
			db := stdlib.OpenDB(*cfg)
			return sqlRunner(db), false, func() { db.Close() }, nil
		case "pq":
			// lib/pq waits for a stalled COMMIT reply after the context
			// ended: bound it by reads, as go-sql-driver's readTimeout does.
			db, err := pqconn.Open(cfg, 2*time.Second)
			if err != nil {
				return nil, false, nil, err
			}
			return sqlRunner(db), false, func() { db.Close() }, nil
		}
		pcfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, false, nil, err
		}
		pcfg.ConnConfig = cfg
		pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
		if err != nil {
			return nil, false, nil, err
		}
		return func(ctx context.Context, fn func(context.Context, execFn) error, opts ...txretry.Option) error {
			return pgxretry.RunInTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
				return fn(ctx, func(ctx context.Context, q string, args ...any) error {
					_, err := tx.Exec(ctx, q, args...)
					return err
				})
			}, opts...)
		}, false, pool.Close, nil
	case "mysql":
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, false, nil, err
		}
		cfg.Addr = proxy
		cfg.ReadTimeout = 2 * time.Second // go-sql-driver bounds COMMIT by this alone
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, false, nil, err
		}
		db := sql.OpenDB(conn)
		return sqlRunner(db), true, func() { db.Close() }, nil
	}
	return nil, false, nil, fmt.Errorf("unknown path %q", path)
}

func sqlRunner(db *sql.DB) childRunner {
	return func(ctx context.Context, fn func(context.Context, execFn) error, opts ...txretry.Option) error {
		return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			return fn(ctx, func(ctx context.Context, q string, args ...any) error {
				_, err := tx.ExecContext(ctx, q, args...)
				return err
			})
		}, opts...)
	}
}
