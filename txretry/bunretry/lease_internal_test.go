package bunretry

import (
	"database/sql"
	"testing"

	"github.com/txretry/txretry/txretry/internal/dbtest"
)

// The adapter leases in the database, as txretry.RunInTx's does, so that
// replicas take turns on a domain that conflicts across processes.
func TestAdapterLeasesInTheDatabase(t *testing.T) {
	dbtest.ForEach(t, "bunretry", func(t *testing.T, _ dbtest.Engine, db *sql.DB) {
		dbtest.Leases(t, adapter{pool: db}.Lease)
	})
}
