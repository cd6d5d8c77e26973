package scenarios

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/txretry/txretry/txretry"
)

// TestPurgeCommitMarkers: the marker table of CommitMarkerDDL and the
// statement of PurgeCommitMarkersSQL work on every engine: the purge deletes
// the markers older than its limit and keeps the recent ones.
func TestPurgeCommitMarkers(t *testing.T) {
	forEachPath(t, allPaths, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		ddl, err := txretry.CommitMarkerDDL("markers")
		if err != nil {
			t.Fatal(err)
		}
		p.setup(t, ctx, ddl,
			"INSERT INTO markers (token, created_at) VALUES ('old', '2000-01-01 00:00:00')",
			"INSERT INTO markers (token) VALUES ('recent')")
		purge, err := txretry.PurgeCommitMarkersSQL("markers", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		p.setup(t, ctx, purge)
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM markers WHERE token = 'old'"); n != 0 {
			t.Errorf("the marker from 2000 survived the purge")
		}
		if n := p.count(t, ctx, "SELECT COUNT(*) FROM markers WHERE token = 'recent'"); n != 1 {
			t.Errorf("the purge deleted a marker made just now")
		}
	})
}

// TestPgxIsolationLevels: pgxretry maps sql.LevelSnapshot to REPEATABLE
// READ and rejects the levels pgx has no name for with ErrInvalidOption,
// without running fn.
func TestPgxIsolationLevels(t *testing.T) {
	forEachPath(t, []pathKind{pgxNative}, func(t *testing.T, p *driverPath) {
		ctx := testContext(t)
		var got string
		if err := p.run(ctx, func(ctx context.Context, q querier) error {
			return q.queryRow(ctx, p.d.txIsolation).Scan(&got)
		}, txretry.WithIsolation(sql.LevelSnapshot)); err != nil {
			t.Fatalf("RunInTx: %v", err)
		}
		if normIsolation(got) != "repeatable read" {
			t.Errorf("LevelSnapshot runs as %q, want repeatable read", got)
		}
		for _, level := range []sql.IsolationLevel{sql.LevelWriteCommitted, sql.LevelLinearizable} {
			runs := 0
			err := p.run(ctx, func(context.Context, querier) error { runs++; return nil }, txretry.WithIsolation(level))
			if !errors.Is(err, txretry.ErrInvalidOption) || runs != 0 {
				t.Errorf("%v: RunInTx = %v after %d runs of fn, want ErrInvalidOption and none", level, err, runs)
			}
		}
	})
}
