package scenarios

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// TestIsolationReachesServer: the transaction fn runs in has the level
// WithIsolation asked for, as the server reports it from inside the
// transaction; without the option it has the server's default.
func TestIsolationReachesServer(t *testing.T) {
	tests := []struct {
		name  string
		opts  []txretry.Option
		level string // "" for the server's default
	}{
		{name: "default"},
		{name: "read committed", opts: []txretry.Option{txretry.WithIsolation(sql.LevelReadCommitted)}, level: "read committed"},
		{name: "repeatable read", opts: []txretry.Option{txretry.WithIsolation(sql.LevelRepeatableRead)}, level: "repeatable read"},
		{name: "serializable", opts: []txretry.Option{txretry.WithIsolation(sql.LevelSerializable)}, level: "serializable"},
	}
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, itemsDDL)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				want := tt.level
				if want == "" {
					want = p.d.defaultIsolation
				}
				var got string
				err := p.run(ctx, func(ctx context.Context, q querier) error {
					// Touch a table first: InnoDB starts its transaction,
					// and lists it, only then.
					var n int
					if err := q.queryRow(ctx, "SELECT COUNT(*) FROM items").Scan(&n); err != nil {
						return err
					}
					time.Sleep(p.d.txIsolationDelay)
					return q.queryRow(ctx, p.d.txIsolation).Scan(&got)
				}, tt.opts...)
				if err != nil {
					t.Fatalf("RunInTx: %v", err)
				}
				if normIsolation(got) != want {
					t.Errorf("isolation inside fn = %q, want %q", got, want)
				}
			})
		}
	})
}

// TestReadOnlyReachesServer: with WithReadOnly a write inside fn fails with
// the server's read-only error (25006 / 1792), which is not retried.
func TestReadOnlyReachesServer(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		p.setup(t, ctx, itemsDDL)
		runs := 0
		err := p.run(ctx, func(ctx context.Context, q querier) error {
			runs++
			return q.exec(ctx, "INSERT INTO items (id) VALUES ($1)", 13)
		}, txretry.WithReadOnly())
		if code := p.d.codeOf(err); code != p.d.readOnly {
			t.Errorf("RunInTx = %v; want the read-only error %s", err, p.d.readOnly)
		}
		if runs != 1 {
			t.Errorf("fn ran %d times, want 1", runs)
		}
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM items"); n != 0 {
			t.Errorf("%d rows, want 0", n)
		}
	})
}
