package pqconn

import (
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
)

// DSN carries what the tests set in pgx's configuration over to lib/pq:
// the address, the credentials (escaped), the database and the run-time
// parameters, and turns TLS off.
func TestDSNCarriesThePgxConfiguration(t *testing.T) {
	cfg, err := pgx.ParseConfig("postgres://app:p%40ss%2Fw@127.0.0.1:6543/txr_db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["deadlock_timeout"] = "100ms"
	u, err := url.Parse(DSN(cfg))
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := u.User.Password()
	q := u.Query()
	if u.Scheme != "postgres" || u.Host != "127.0.0.1:6543" || u.User.Username() != "app" || pass != "p@ss/w" ||
		u.Path != "/txr_db" || q.Get("sslmode") != "disable" || q.Get("deadlock_timeout") != "100ms" {
		t.Fatalf("DSN = %s: want app:p@ss/w at 127.0.0.1:6543, database txr_db, sslmode=disable, deadlock_timeout=100ms", u.Redacted())
	}
	cfg.Password = ""
	u, err = url.Parse(DSN(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if got := u.User.String(); got != "app" {
		t.Fatalf("DSN without a password has user info %q, want app", got)
	}
}
