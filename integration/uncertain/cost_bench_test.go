package uncertain

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// The cost of the built-in verifiers on short write transactions (one
// UPDATE of a random row among 1,000), pgx native, one caller: compare
// ns/op of the sub-benchmarks. The target for xact-status is at most 5%.
func BenchmarkVerifierCost(b *testing.B) {
	dsn := dbservertest.Postgres(b)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	ddl, _ := txretry.CommitMarkerDDL(markerTable)
	for _, q := range []string{
		"CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL)",
		"INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 1000) g",
		ddl,
	} {
		if _, err := pool.Exec(context.Background(), q); err != nil {
			b.Fatal(err)
		}
	}
	fn := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", rand.IntN(1000)+1)
		return err
	}
	for _, v := range []struct {
		name string
		opts []txretry.Option
	}{
		{"none", nil},
		{"xact-status", []txretry.Option{txretry.WithXactStatusVerification()}},
		{"commit-marker", []txretry.Option{txretry.WithCommitMarker(markerTable)}},
	} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				if err := pgxretry.RunInTx(context.Background(), pool, fn, v.opts...); err != nil {
					b.Fatal(fmt.Errorf("%s: %w", v.name, err))
				}
			}
		})
	}
}
