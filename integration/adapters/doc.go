// Package adapters tests the adapter modules of txretry (sqlxretry,
// gormretry, bunretry) on real PostgreSQL and MySQL/MariaDB servers,
// through the shared server resolution (dbserver/dbservertest) and through the
// fault proxy (internal/faultproxy), which the adapter modules cannot
// import: genuine lost-update conflicts and deadlocks retried with the
// invariant checked, permanent errors returned at once, lost COMMITs
// reported uncertain and resolved by each verifier, nested calls and each
// library's savepoints, TxOrDB (txretry's and pgxretry's too), and no
// connection or goroutine left behind.
//
// The integration module requires the adapter modules through replace
// directives; the root module and the adapters' own modules stay free of
// each other's dependencies.
package adapters
