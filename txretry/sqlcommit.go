package txretry

import (
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/txretry/txretry/txretry/internal/dblock"
)

// sqlDriver is what the database/sql adapter knows of a driver's COMMIT
// errors beyond the engine's rules (see the package documentation).
type sqlDriver uint8

const (
	sqlDriverOther     sqlDriver = iota // ErrBadConn at COMMIT is uncertain
	sqlDriverPgxStdlib                  // pgx v5's stdlib: ErrBadConn never comes from COMMIT
	sqlDriverMySQL                      // go-sql-driver/mysql: ErrBadConn only for a COMMIT not sent or refused
	sqlDriverPQ                         // lib/pq: ErrBadConn also after COMMIT was sent
)

// sqlDriverOf tells db's driver by the package that defines its type
// (drivers are not imported). A *sql.Conn is asked through Raw, before
// BEGIN: afterwards Raw would wait for the transaction, and after a
// driver.ErrBadConn the Conn is closed.
func sqlDriverOf(db DB) sqlDriver {
	var v any
	switch h := db.(type) {
	case *sql.DB:
		v = driverOf(h)
	case *sql.Conn:
		_ = h.Raw(func(dc any) error { v = dc; return nil })
	}
	switch dblock.PkgPath(v) {
	case "github.com/jackc/pgx/v5/stdlib":
		return sqlDriverPgxStdlib
	case "github.com/go-sql-driver/mysql":
		return sqlDriverMySQL
	case "github.com/lib/pq":
		return sqlDriverPQ
	}
	return sqlDriverOther
}

// pqInFailedTransactionMsg is the text of lib/pq's ErrInFailedTransaction,
// which its Commit returns, without sending COMMIT, after rolling back a
// transaction that the server reported failed (lib/pq v1.10.9 conn.go,
// (*conn).Commit). Matched by text: the core does not import lib/pq; the
// integration module pins it to lib/pq's value and to a real server.
const pqInFailedTransactionMsg = "pq: Could not complete operation in a failed transaction"

// provenNotCommitted reports whether err, returned by d's COMMIT, proves
// that nothing was committed by what only the driver's source shows.
// driver.ErrBadConn does only where the driver returns it from COMMIT
// before sending it (or for a COMMIT the server refused): go-sql-driver/mysql
// (and pgx v5's stdlib, which never returns it from COMMIT). lib/pq returns
// it also for io.EOF while reading COMMIT's reply and for any FATAL error
// (error.go, (*conn).errRecover): uncertain, as for drivers not known here.
func (d sqlDriver) provenNotCommitted(err error) bool {
	switch d {
	case sqlDriverPgxStdlib, sqlDriverMySQL:
		return errors.Is(err, driver.ErrBadConn)
	case sqlDriverPQ:
		return walk(err, func(e error) bool { return !isWrapper(e) && e.Error() == pqInFailedTransactionMsg })
	}
	return false
}
