// Package dbconntest gives the examples' smoke tests their database servers,
// through package dbconn: from TXRETRY_PG_DSN / TXRETRY_MYSQL_DSN, else from
// containers. A test whose server is unavailable is skipped with a message
// that says what to set, or fails under CI=true (where a skipped smoke test
// would make a green run meaningless) and when the DSN variable is set but
// its server does not answer.
//
// Use it with:
//
//	func TestMain(m *testing.M) { dbconntest.Main(m) }
package dbconntest
