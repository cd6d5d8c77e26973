package scenarios

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// BenchmarkOverheadPostgres measures what RunInTx adds to a one-statement
// transaction on a real PostgreSQL server (loopback for the README's
// figure), for database/sql over pgx's stdlib driver and for native pgx,
// on one connection. Each iteration runs the same UPDATE twice, once by
// hand (BeginTx, Exec, Commit) and once through RunInTx, in alternating
// order, so that a load that drifts during the run weighs on both alike;
// the metrics are each one's mean time and allocations per transaction and
// the difference (go test -bench Overhead -count 6). COMMIT does not wait
// for the disk (synchronous_commit off), whose flush time would drown the
// difference.
func BenchmarkOverheadPostgres(b *testing.B) {
	dsn := dbservertest.Postgres(b)
	ctx := context.Background()
	const update = "UPDATE bench SET v = v + 1 WHERE id = 1"

	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	cfg.MaxConns = 1
	db := stdlib.OpenDB(*cfg.ConnConfig)
	defer db.Close()
	for _, s := range []string{"CREATE TABLE bench (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO bench VALUES (1, 0)"} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()

	sqlFn := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, update)
		return err
	}
	pgxFn := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, update)
		return err
	}
	b.Run("database-sql", func(b *testing.B) {
		benchPair(b, func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := sqlFn(ctx, tx); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}, func() error { return txretry.RunInTx(ctx, db, sqlFn) })
	})
	b.Run("pgx", func(b *testing.B) {
		benchPair(b, func() error {
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{})
			if err != nil {
				return err
			}
			if err := pgxFn(ctx, tx); err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
			return tx.Commit(ctx)
		}, func() error { return pgxretry.RunInTx(ctx, pool, pgxFn) })
	})
}

// benchPair runs bare and wrapped alternately and reports each one's mean
// time and allocations per call, and the difference in time.
func benchPair(b *testing.B, bare, wrapped func() error) {
	fns := [2]func() error{bare, wrapped}
	var allocs [2]float64
	for i, f := range fns {
		allocs[i] = testing.AllocsPerRun(100, func() {
			if err := f(); err != nil {
				b.Fatal(err)
			}
		})
	}
	var spent [2]time.Duration
	n := 0
	for b.Loop() {
		for k := range 2 {
			i := (n + k) % 2
			t0 := time.Now()
			if err := fns[i](); err != nil {
				b.Fatal(err)
			}
			spent[i] += time.Since(t0)
		}
		n++
	}
	bareNs, wrappedNs := float64(spent[0].Nanoseconds())/float64(n), float64(spent[1].Nanoseconds())/float64(n)
	b.ReportMetric(bareNs, "bare-ns/tx")
	b.ReportMetric(wrappedNs, "RunInTx-ns/tx")
	b.ReportMetric(wrappedNs-bareNs, "overhead-ns/tx")
	b.ReportMetric(allocs[0], "bare-allocs/tx")
	b.ReportMetric(allocs[1], "RunInTx-allocs/tx")
}
