package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// pgMaxIdent is PostgreSQL's identifier limit (NAMEDATALEN-1 bytes).
const pgMaxIdent = 63

// pgForceVersion is the first server_version_num with DROP DATABASE ...
// WITH (FORCE).
const pgForceVersion = 130000

var postgresBackend = backend{
	name:        "PostgreSQL",
	dsnEnv:      envPGDSN,
	example:     "postgres://user@host:5432/db?sslmode=disable",
	maxIdent:    pgMaxIdent,
	pingTimeout: pingTimeout,
	probe:       probePostgres,
	container:   postgresContainer,
	databaseDSN: postgresDSN,
	create:      createPostgres,
	drop:        dropPostgres,
}

// probePostgres pings the server and reads its version.
func probePostgres(ctx context.Context, dsn string) (serverInfo, error) {
	info := serverInfo{flavor: "postgres"}
	err := withDB(ctx, "pgx", dsn, func(db *sql.DB) error {
		return db.QueryRowContext(ctx,
			"SELECT current_setting('server_version_num')::int, current_setting('server_version')",
		).Scan(&info.versionNum, &info.version)
	})
	return info, err
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
	u, err := url.Parse(admin)
	if err != nil {
		// url.Error repeats the whole URL, password included.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return "", fmt.Errorf("parse URL: %w", err)
	}
	u.Path = "/" + name
	u.RawPath = ""
	if q := u.Query(); q.Has("dbname") {
		q.Del("dbname")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// createPostgres creates database name.
func createPostgres(ctx context.Context, admin, name string) error {
	return withConn(ctx, "pgx", admin, func(conn *sql.Conn) error {
		_, err := conn.ExecContext(ctx, "CREATE DATABASE "+quotePostgres(name))
		return err
	})
}

// dropPostgres drops database name, ending the sessions still connected to
// it.
func dropPostgres(ctx context.Context, admin, name string, info serverInfo) error {
	return withConn(ctx, "pgx", admin, func(conn *sql.Conn) error {
		for _, stmt := range dropPostgresSQL(name, info.versionNum) {
			if _, err := conn.ExecContext(ctx, stmt.query, stmt.args...); err != nil {
				return err
			}
		}
		return nil
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

// quotePostgres quotes a PostgreSQL identifier.
func quotePostgres(ident string) string {
	return `"` + strings.ReplaceAll(ident, `"`, `""`) + `"`
}
