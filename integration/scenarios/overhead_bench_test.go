package scenarios

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/txretry/txretry/integration/internal/dbtest"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// BenchmarkOverheadPostgres measures what RunInTx adds to a one-statement
// transaction on a real PostgreSQL server (loopback for the README's
// figure): each pair runs the same UPDATE, once by hand (BeginTx, Exec,
// Commit) and once through RunInTx, on one connection, for database/sql
// over pgx's stdlib driver and for native pgx. Compare ns/op and allocs/op
// within a pair (go test -bench Overhead -count 6 -benchmem).
func BenchmarkOverheadPostgres(b *testing.B) {
	dsn := dbtest.Postgres(b)
	ctx := context.Background()
	const update = "UPDATE bench SET v = v + 1 WHERE id = 1"

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, s := range []string{"CREATE TABLE bench (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO bench VALUES (1, 0)"} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	sqlFn := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, update)
		return err
	}
	b.Run("database-sql/bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := sqlFn(ctx, tx); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("database-sql/RunInTx", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := txretry.RunInTx(ctx, db, sqlFn); err != nil {
				b.Fatal(err)
			}
		}
	})

	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	pgxFn := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, update)
		return err
	}
	b.Run("pgx/bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if err := pgxFn(ctx, tx); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pgx/RunInTx", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := pgxretry.RunInTx(ctx, pool, pgxFn); err != nil {
				b.Fatal(err)
			}
		}
	})
}
