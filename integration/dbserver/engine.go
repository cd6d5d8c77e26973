package dbserver

import (
	"strconv"
	"strings"
)

// Engine is a database engine family.
type Engine uint8

// The engines the examples run against.
const (
	// Postgres is PostgreSQL, reached with pgx.
	Postgres Engine = iota + 1
	// MySQL is MySQL or MariaDB, reached with go-sql-driver/mysql.
	MySQL
)

// String returns "PostgreSQL" or "MySQL".
func (e Engine) String() string {
	switch e {
	case Postgres:
		return "PostgreSQL"
	case MySQL:
		return "MySQL"
	default:
		return "Engine(" + strconv.Itoa(int(e)) + ")"
	}
}

// Driver returns the database/sql driver name the examples register for e:
// "pgx" (github.com/jackc/pgx/v5/stdlib) or "mysql"
// (github.com/go-sql-driver/mysql).
func (e Engine) Driver() string {
	if e == Postgres {
		return "pgx"
	}
	return "mysql"
}

// EnvVar returns the environment variable holding e's DSN:
// TXRETRY_PG_DSN or TXRETRY_MYSQL_DSN.
func (e Engine) EnvVar() string {
	if e == Postgres {
		return EnvPGDSN
	}
	return EnvMySQLDSN
}

// Rebind rewrites the ? placeholders of query into e's style: $1, $2, ...
// for PostgreSQL; unchanged for MySQL. A ? inside a quoted string literal or
// quoted identifier is left alone. The examples write their SQL once, with ?,
// and rebind it per engine.
func (e Engine) Rebind(query string) string {
	if e != Postgres || !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	n := 0
	var quote byte // the quote character we are inside of, or 0
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?':
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
