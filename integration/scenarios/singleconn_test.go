package scenarios

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// TestConnectionLossOnASingleConnection: a *sql.Conn or *pgx.Conn whose
// backend was ended (pg_terminate_backend from another connection) does
// not come back, so WithRetryOnConnectionLoss does not retry it: the call
// returns the connection error after one attempt, with no retry scheduled,
// as without the option (before, it made attempts until its deadline).
func TestConnectionLossOnASingleConnection(t *testing.T) {
	dsn, admin := dbservertest.Postgres(t), dbservertest.PostgresAdmin(t)
	for _, tc := range []struct {
		name string
		open func(t *testing.T, ctx context.Context) (pid func() int64, run func(ctx context.Context, fn func(ctx context.Context) error, opts ...txretry.Option) error)
	}{
		{"sql-conn", func(t *testing.T, ctx context.Context) (func() int64, func(context.Context, func(context.Context) error, ...txretry.Option) error) {
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			db := stdlib.OpenDB(*cfg)
			t.Cleanup(func() { db.Close() })
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return func() int64 {
					var id int64
					if err := conn.QueryRowContext(ctx, pgDialect.backendID).Scan(&id); err != nil {
						t.Fatal(err)
					}
					return id
				}, func(ctx context.Context, fn func(context.Context) error, opts ...txretry.Option) error {
					return txretry.RunInTx(ctx, conn, func(ctx context.Context, tx *sql.Tx) error {
						if err := fn(ctx); err != nil {
							return err
						}
						_, err := tx.ExecContext(ctx, "SELECT 1")
						return err
					}, opts...)
				}
		}},
		{"pgx-conn", func(t *testing.T, ctx context.Context) (func() int64, func(context.Context, func(context.Context) error, ...txretry.Option) error) {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close(context.Background()) })
			return func() int64 {
					var id int64
					if err := conn.QueryRow(ctx, pgDialect.backendID).Scan(&id); err != nil {
						t.Fatal(err)
					}
					return id
				}, func(ctx context.Context, fn func(context.Context) error, opts ...txretry.Option) error {
					return pgxretry.RunInTx(ctx, conn, func(ctx context.Context, tx pgx.Tx) error {
						if err := fn(ctx); err != nil {
							return err
						}
						_, err := tx.Exec(ctx, "SELECT 1")
						return err
					}, opts...)
				}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			pid, run := tc.open(t, ctx)
			if err := pgDialect.kill(ctx, admin, pid()); err != nil {
				t.Fatalf("kill: %v", err)
			}
			var runs atomic.Int32
			var ev events
			err := run(ctx, func(context.Context) error { runs.Add(1); return nil },
				txretry.WithRetryOnConnectionLoss(), ev.option())
			t.Logf("RunInTx on the killed connection: %v", err)
			if err == nil || errors.Is(err, txretry.ErrRetriesExhausted) || errors.Is(err, txretry.ErrCommitUncertain) || ctx.Err() != nil {
				t.Fatalf("RunInTx = %v; want the connection error itself", err)
			}
			if n, r := len(ev.of(txretry.AttemptStarted)), len(ev.of(txretry.RetryScheduled)); n != 1 || r != 0 {
				t.Errorf("%d attempts, %d retries scheduled; want 1 attempt and no retry", n, r)
			}
			if n := runs.Load(); n > 1 {
				t.Errorf("fn ran %d times, want at most once", n)
			}
		})
	}
}
