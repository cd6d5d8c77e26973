package dbserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Per-test databases: a test gets a database of its own, created with the
// server's DSN and dropped when it ends, so that parallel tests never share
// tables.

// Identifier limits, in bytes.
const (
	// pgMaxIdent is PostgreSQL's identifier limit (NAMEDATALEN-1).
	pgMaxIdent = 63
	// mysqlMaxIdent is the MySQL and MariaDB limit on database names.
	mysqlMaxIdent = 64
)

// pgForceVersion is the first server_version_num with DROP DATABASE ...
// WITH (FORCE).
const pgForceVersion = 130000

// mysqlErrNoSuchThread is ER_NO_SUCH_THREAD, returned by KILL for a session
// that ended in the meantime.
const mysqlErrNoSuchThread = 1094

// mysqlLockWaitTimeout bounds, in seconds, how long a DROP DATABASE waits
// for metadata locks, so that the server reports a lock rather than the
// client timing out.
const mysqlLockWaitTimeout = 20

// namePrefix starts every per-test database name, so leftovers are easy to
// spot and to drop by hand.
const namePrefix = "txr_"

// DatabaseName returns a fresh database name for the test called testName:
// txr_<sanitized test name>_<8 random hex digits>, short enough for e.
// It needs no quoting on either engine.
func DatabaseName(e Engine, testName string) string {
	limit := mysqlMaxIdent
	if e == Postgres {
		limit = pgMaxIdent
	}
	return databaseName(testName, limit, fmt.Sprintf("%08x", rand.Uint32()))
}

// databaseName returns txr_<sanitized testName>_<suffix>, at most limit
// bytes long. The test name is lowercased and every run of characters
// outside [a-z0-9] becomes one underscore; it is shortened from the end to
// fit the limit.
func databaseName(testName string, limit int, suffix string) string {
	room := max(limit-len(namePrefix)-1-len(suffix), 0)
	s := sanitize(testName)
	if len(s) > room {
		s = strings.TrimRight(s[:room], "_")
	}
	if s == "" {
		s = "test"
		if len(s) > room {
			s = s[:room]
		}
	}
	return namePrefix + s + "_" + suffix
}

// sanitize lowercases name and turns each run of characters outside
// [a-z0-9] into a single underscore, trimming underscores at both ends.
func sanitize(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	pending := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if pending && b.Len() > 0 {
				b.WriteByte('_')
			}
			pending = false
			b.WriteRune(r)
			continue
		}
		pending = true
	}
	return b.String()
}

// validDSN reports whether dsn is a DSN of e's form.
func validDSN(e Engine, dsn string) error {
	_, err := databaseDSN(e, dsn, "txr_check")
	return err
}

// databaseDSN returns the server DSN with its database replaced by name.
func databaseDSN(e Engine, dsn, name string) (string, error) {
	if e == Postgres {
		return postgresDSN(dsn, name)
	}
	return mysqlDSN(dsn, name)
}

// postgresDSN returns admin with its database replaced by name. A URL keeps
// its user, host and parameters; a keyword/value DSN gets a dbname keyword
// appended, which overrides an earlier one.
func postgresDSN(admin, name string) (string, error) {
	if !strings.HasPrefix(admin, "postgres://") && !strings.HasPrefix(admin, "postgresql://") {
		if !strings.Contains(admin, "=") {
			return "", errors.New("want a postgres:// URL or keyword=value pairs")
		}
		return admin + " dbname=" + name, nil
	}
	u, err := parseURL(admin)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	u.RawPath = ""
	if q := u.Query(); q.Has("dbname") {
		q.Del("dbname")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// parseURL parses a PostgreSQL URL with an error that does not repeat it
// (url.Error repeats the whole URL, password included).
func parseURL(dsn string) (*url.URL, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("parse PostgreSQL URL: %w", err)
	}
	return u, nil
}

// mysqlDSN returns admin with its database replaced by name, parseTime=true
// and multiStatements=false; its other parameters are kept.
func mysqlDSN(admin, name string) (string, error) {
	cfg, err := mysql.ParseDSN(admin)
	if err != nil {
		return "", err
	}
	cfg.DBName = name
	cfg.ParseTime = true
	cfg.MultiStatements = false
	return cfg.FormatDSN(), nil
}

// CreateDatabase creates the database name (see DatabaseName) on s and
// returns a DSN of it: the server's DSN with the database replaced (and,
// for MySQL, parseTime=true, multiStatements=false). A MySQL database uses
// the utf8mb4 character set, which MariaDB does not use by default.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	dsn, err := databaseDSN(s.Engine, s.DSN, name)
	if err != nil {
		return "", err
	}
	stmt := "CREATE DATABASE " + quotePostgres(name)
	if s.Engine == MySQL {
		stmt = "CREATE DATABASE " + quoteMySQL(name) + " CHARACTER SET utf8mb4"
	}
	err = withConn(ctx, s.Engine.Driver(), s.DSN, func(conn *sql.Conn) error {
		_, err := conn.ExecContext(ctx, stmt)
		return err
	})
	if err != nil {
		return "", err
	}
	return dsn, nil
}

// DropDatabase drops the database name, ending the sessions still using it
// so that a transaction a test left open cannot block the drop.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	if s.Engine == Postgres {
		return withConn(ctx, "pgx", s.DSN, func(conn *sql.Conn) error {
			for _, stmt := range dropPostgresSQL(name, s.versionNum) {
				if _, err := conn.ExecContext(ctx, stmt.query, stmt.args...); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return withConn(ctx, "mysql", s.DSN, func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", mysqlLockWaitTimeout)); err != nil {
			return err
		}
		ids, err := mysqlSessions(ctx, conn, name)
		if err != nil {
			return err
		}
		for _, id := range ids {
			// KILL takes no placeholder; id is a number the server gave.
			_, err := conn.ExecContext(ctx, fmt.Sprintf("KILL %d", id))
			if me, ok := errors.AsType[*mysql.MySQLError](err); ok && me.Number == mysqlErrNoSuchThread {
				continue
			}
			if err != nil {
				return fmt.Errorf("kill session %d: %w", id, err)
			}
		}
		_, err = conn.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoteMySQL(name))
		return err
	})
}

// statement is one SQL statement with its arguments.
type statement struct {
	query string
	args  []any
}

// dropPostgresSQL returns the statements that drop database name on a server
// of version versionNum: DROP DATABASE ... WITH (FORCE) from PostgreSQL 13,
// pg_terminate_backend followed by DROP DATABASE before.
func dropPostgresSQL(name string, versionNum int) []statement {
	if versionNum >= pgForceVersion {
		return []statement{{query: "DROP DATABASE IF EXISTS " + quotePostgres(name) + " WITH (FORCE)"}}
	}
	return []statement{
		{
			query: "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
			args:  []any{name},
		},
		{query: "DROP DATABASE IF EXISTS " + quotePostgres(name)},
	}
}

// mysqlSessions lists the other sessions whose current database is name.
func mysqlSessions(ctx context.Context, conn *sql.Conn, name string) (ids []uint64, err error) {
	rows, err := conn.QueryContext(ctx,
		"SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ? AND ID <> CONNECTION_ID()", name)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, rows.Close()) }()
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// quotePostgres quotes a PostgreSQL identifier.
func quotePostgres(ident string) string {
	return `"` + strings.ReplaceAll(ident, `"`, `""`) + `"`
}

// quoteMySQL quotes a MySQL identifier.
func quoteMySQL(ident string) string {
	return "`" + strings.ReplaceAll(ident, "`", "``") + "`"
}
