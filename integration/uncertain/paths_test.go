package uncertain

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/integration/internal/faultproxy"
	"github.com/txretry/txretry/integration/internal/pqconn"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// execer runs one statement inside the attempt's transaction.
type execer func(ctx context.Context, query string, args ...any) error

// runner is RunInTx of one driver path, with fn reduced to statements.
type runner func(ctx context.Context, fn func(ctx context.Context, exec execer) error, opts ...txretry.Option) error

// path is one driver path through a fault proxy, plus a direct connection
// (not through the proxy) to check what the server really has.
type path struct {
	name   string
	proto  faultproxy.Protocol
	pg     bool
	run    runner
	direct *sql.DB
	proxy  *faultproxy.Proxy
	ph     func(n int) string // placeholder
	inUse  func() int         // connections in use in the proxied pool
}

const commitTimeout = 700 * time.Millisecond

// paths opens every driver path through its own proxy, in a fresh database.
func paths(t *testing.T) []*path {
	t.Helper()
	return []*path{pgxNative(t), pgxStdlib(t), pqPath(t), mysqlPath(t)}
}

func pgPlaceholder(n int) string         { return "$" + strconv.Itoa(n) }
func myPlaceholder(int) string           { return "?" }
func hostPort(h string, p uint16) string { return net.JoinHostPort(h, strconv.Itoa(int(p))) }

func pgSetup(t *testing.T) (dsn string, direct *sql.DB, proxy *faultproxy.Proxy, proxied *pgx.ConnConfig) {
	t.Helper()
	dsn = dbservertest.Postgres(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	direct = stdlib.OpenDB(*cfg)
	t.Cleanup(func() { direct.Close() })
	prepare(t, direct, true)
	proxy = faultproxy.StartPartition(t, hostPort(cfg.Host, cfg.Port), faultproxy.Postgres)
	host, port, _ := net.SplitHostPort(proxy.Addr())
	p, _ := strconv.Atoi(port)
	proxied = cfg.Copy()
	proxied.Host, proxied.Port = host, uint16(p)
	proxied.Fallbacks = nil
	return dsn, direct, proxy, proxied
}

func pgxNative(t *testing.T) *path {
	dsn, direct, proxy, proxied := pgSetup(t)
	pool := newPgxPool(t, dsn, proxied)
	return &path{name: "pgx", proto: faultproxy.Postgres, pg: true, direct: direct, proxy: proxy, ph: pgPlaceholder,
		inUse: func() int { return int(pool.Stat().AcquiredConns()) }, run: pgxRunner(pool)}
}

// newPgxPool opens a pgxpool with dsn's pool settings whose connections
// use cc (a proxied configuration), closed at t's cleanup.
func newPgxPool(t *testing.T, dsn string, cc *pgx.ConnConfig) *pgxpool.Pool {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig = cc
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func pgxRunner(pool *pgxpool.Pool) runner {
	return func(ctx context.Context, fn func(context.Context, execer) error, opts ...txretry.Option) error {
		return pgxretry.RunInTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			return fn(ctx, func(ctx context.Context, q string, args ...any) error {
				_, err := tx.Exec(ctx, q, args...)
				return err
			})
		}, opts...)
	}
}

func sqlRunner(db *sql.DB) runner {
	return func(ctx context.Context, fn func(context.Context, execer) error, opts ...txretry.Option) error {
		return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			return fn(ctx, func(ctx context.Context, q string, args ...any) error {
				_, err := tx.ExecContext(ctx, q, args...)
				return err
			})
		}, opts...)
	}
}

func pgxStdlib(t *testing.T) *path {
	_, direct, proxy, proxied := pgSetup(t)
	db := stdlib.OpenDB(*proxied)
	t.Cleanup(func() { db.Close() })
	return &path{name: "pgx-stdlib", proto: faultproxy.Postgres, pg: true, direct: direct, proxy: proxy, ph: pgPlaceholder,
		inUse: func() int { return db.Stats().InUse }, run: sqlRunner(db)}
}

func pqPath(t *testing.T) *path {
	_, direct, proxy, proxied := pgSetup(t)
	// lib/pq keeps waiting for a stalled reply after COMMIT's context
	// ended: only a read timeout bounds it, as for go-sql-driver.
	db, err := pqconn.Open(proxied, commitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &path{name: "pq", proto: faultproxy.Postgres, pg: true, direct: direct, proxy: proxy, ph: pgPlaceholder,
		inUse: func() int { return db.Stats().InUse }, run: sqlRunner(db)}
}

// mysqlDirect is the test MySQL server's configuration, in a fresh
// database, and a direct connection to it (not through a proxy), closed at
// t's cleanup.
func mysqlDirect(t *testing.T) (*mysql.Config, *sql.DB) {
	t.Helper()
	cfg, err := mysql.ParseDSN(dbservertest.MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	direct, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	return cfg, direct
}

func mysqlPath(t *testing.T) *path {
	t.Helper()
	cfg, direct := mysqlDirect(t)
	prepare(t, direct, false)
	proxy := faultproxy.StartPartition(t, cfg.Addr, faultproxy.MySQL)
	pc := cfg.Clone()
	pc.Addr = proxy.Addr()
	// go-sql-driver ignores the context during COMMIT: only readTimeout
	// bounds a stalled reply.
	pc.ReadTimeout = commitTimeout
	db, err := sql.Open("mysql", pc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &path{name: "mysql", proto: faultproxy.MySQL, direct: direct, proxy: proxy, ph: myPlaceholder,
		inUse: func() int { return db.Stats().InUse }, run: sqlRunner(db)}
}

const markerTable = "txretry_markers"

// prepare creates the effects log (not unique, so a duplicate shows) and the
// commit-marker table.
func prepare(t *testing.T, db *sql.DB, pg bool) {
	t.Helper()
	ddl, err := txretry.CommitMarkerDDL(markerTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE effects (id VARCHAR(64) NOT NULL, attempt INT NOT NULL)",
		"CREATE INDEX effects_id ON effects (id)",
		ddl,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// count returns how many times the effect id was applied, read directly.
func (p *path) count(t testing.TB, id string) int {
	t.Helper()
	var n int
	if err := p.direct.QueryRow("SELECT count(*) FROM effects WHERE id = "+p.ph(1), id).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", id, err)
	}
	return n
}

// insert returns the fn of a call whose only effect is one row for id.
func (p *path) insert(id string, runs *int32) func(context.Context, execer) error {
	return func(ctx context.Context, exec execer) error {
		n := addInt32(runs)
		return exec(ctx, fmt.Sprintf("INSERT INTO effects (id, attempt) VALUES (%s, %s)", p.ph(1), p.ph(2)), id, n)
	}
}

// lookup is a verification callback: the effect is unique to the call. A
// plain read is enough for the faults injected here, because a COMMIT
// dropped before the server can never commit later.
func (p *path) lookup(id string) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		var n int
		err := p.direct.QueryRowContext(ctx, "SELECT count(*) FROM effects WHERE id = "+p.ph(1), id).Scan(&n)
		return n > 0, err
	}
}

// noneInUse waits for the pool to have no connection in use: pgxpool
// destroys a broken connection in the background after the call returns.
func (p *path) noneInUse(t testing.TB) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); p.inUse() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still in use", p.inUse())
		}
	}
}
