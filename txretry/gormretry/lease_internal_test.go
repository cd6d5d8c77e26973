package gormretry

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/dbtest"
)

// The adapter leases in the database, as txretry.RunInTx's does, so that
// replicas take turns on a domain that conflicts across processes; a
// *gorm.DB opened on one *sql.Conn does not lease. It overlaps a leased
// attempt's COMMIT with the next on MySQL and MariaDB.
func TestAdapterLeasesInTheDatabase(t *testing.T) {
	dbtest.ForEach(t, "gormretry", func(t *testing.T, e dbtest.Engine, db *sql.DB) {
		dbtest.Leases(t, adapter{pool: db, handle: db}.Lease)
		dbtest.OverlapsCommit(t, e, adapter{pool: db, handle: db}.OverlapCommit())
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := (adapter{pool: conn, handle: conn}).Lease(context.Background(), "k"); !errors.Is(err, txretry.ErrInvalidOption) {
			t.Fatalf("a lease on a *sql.Conn: %v, want ErrInvalidOption", err)
		}
		if (adapter{pool: conn, handle: conn}).OverlapCommit() {
			t.Fatal("a *sql.Conn, which does not lease, overlaps COMMIT")
		}
	})
}
