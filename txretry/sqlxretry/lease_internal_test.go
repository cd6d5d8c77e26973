package sqlxretry

import (
	"database/sql"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/txretry/txretry/txretry/internal/dbtest"
)

// The adapter leases in the database, as txretry.RunInTx's does, so that
// replicas take turns on a domain that conflicts across processes, and
// overlaps a leased attempt's COMMIT with the next on MySQL and MariaDB.
func TestAdapterLeasesInTheDatabase(t *testing.T) {
	dbtest.ForEach(t, "sqlxretry", func(t *testing.T, e dbtest.Engine, db *sql.DB) {
		a := adapter{db: sqlx.NewDb(db, e.Driver)}
		dbtest.Leases(t, a.Lease)
		dbtest.OverlapsCommit(t, e, a.OverlapCommit())
	})
}
