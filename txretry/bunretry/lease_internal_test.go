package bunretry

import (
	"database/sql"
	"testing"

	"github.com/txretry/txretry/txretry/internal/dbtest"
)

// The adapter leases in the database, as txretry.RunInTx's does, so that
// replicas take turns on a domain that conflicts across processes, and
// overlaps a leased attempt's COMMIT with the next on MySQL and MariaDB.
func TestAdapterLeasesInTheDatabase(t *testing.T) {
	dbtest.ForEach(t, "bunretry", func(t *testing.T, e dbtest.Engine, db *sql.DB) {
		dbtest.Leases(t, adapter{pool: db}.Lease)
		dbtest.OverlapsCommit(t, e, adapter{pool: db}.OverlapCommit())
	})
}
