package dbconn_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/txretry/txretry/examples/internal/dbconn"
	"github.com/txretry/txretry/examples/internal/dbconntest"
)

func TestMain(m *testing.M) { dbconntest.Main(m) }

// TestNamespace checks, on each reachable server, that a namespace's DSN
// resolves unqualified table names in the namespace, and that Drop removes
// it.
func TestNamespace(t *testing.T) {
	for _, e := range []dbconn.Engine{dbconn.Postgres, dbconn.MySQL} {
		t.Run(e.String(), func(t *testing.T) {
			srv := dbconntest.Server(t, e)
			ns := dbconntest.Namespace(t, srv, "txretry_test_dbconn")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			db, err := sql.Open(e.Driver(), ns.DSN)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			table := ns.Table("probe")
			if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (id INT PRIMARY KEY)"); err != nil {
				t.Fatalf("create table in %s: %v", ns.Where, err)
			}
			if _, err := db.ExecContext(ctx, e.Rebind("INSERT INTO "+table+" (id) VALUES (?)"), 7); err != nil {
				t.Fatal(err)
			}

			// The table is in the namespace, not in the DSN's own database.
			var where string
			query := "SELECT table_schema FROM information_schema.tables WHERE table_name = ?"
			if err := db.QueryRowContext(ctx, e.Rebind(query), table).Scan(&where); err != nil {
				t.Fatal(err)
			}
			if want := ns.Name; ns.Prefix == "" && where != want {
				t.Errorf("table is in %q, want %q", where, want)
			}

			if err := ns.Drop(ctx); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := db.QueryRowContext(ctx, e.Rebind(
				"SELECT COUNT(*) FROM information_schema.tables WHERE table_name = ?"), table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("after Drop, %d tables named %s remain", n, table)
			}
			t.Log(srv, ns.Where, fmt.Sprint(srv.Flavor()))
		})
	}
}
