package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// mysqlMaxIdent is the MySQL and MariaDB limit on database names
// (64 characters).
const mysqlMaxIdent = 64

// mysqlErrNoSuchThread is ER_NO_SUCH_THREAD, returned by KILL for a session
// that ended in the meantime.
const mysqlErrNoSuchThread = 1094

// mysqlLockWaitTimeout bounds, in seconds, how long the DROP DATABASE of a
// cleanup waits for metadata locks; it is below cleanupTimeout so that the
// server reports the lock instead of the client timing out.
const mysqlLockWaitTimeout = 20

var mysqlBackend = backend{
	name:        "MySQL",
	dsnEnv:      envMySQLDSN,
	example:     "root@tcp(host:3306)/test",
	maxIdent:    mysqlMaxIdent,
	pingTimeout: pingTimeout,
	probe:       probeMySQL,
	container:   mysqlContainer,
	databaseDSN: mysqlDSN,
	create:      createMySQL,
	drop:        dropMySQL,
}

// probeMySQL pings the server and reads its version; a version containing
// "MariaDB" means the mariadb flavor.
func probeMySQL(ctx context.Context, dsn string) (serverInfo, error) {
	var info serverInfo
	err := withDB(ctx, "mysql", dsn, func(db *sql.DB) error {
		return db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&info.version)
	})
	info.flavor = mysqlFlavor(info.version)
	return info, err
}

// mysqlFlavor returns "mariadb" if version is a MariaDB version string, else
// "mysql".
func mysqlFlavor(version string) string {
	if strings.Contains(strings.ToLower(version), "mariadb") {
		return "mariadb"
	}
	return "mysql"
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

// createMySQL creates database name with the utf8mb4 character set, which
// MariaDB does not use by default.
func createMySQL(ctx context.Context, admin, name string) error {
	return withConn(ctx, "mysql", admin, func(conn *sql.Conn) error {
		_, err := conn.ExecContext(ctx, "CREATE DATABASE "+quoteMySQL(name)+" CHARACTER SET utf8mb4")
		return err
	})
}

// dropMySQL kills the sessions using database name, then drops it. Without
// the kills, a transaction the test left open would hold a metadata lock
// that DROP DATABASE waits for.
func dropMySQL(ctx context.Context, admin, name string, _ serverInfo) error {
	return withConn(ctx, "mysql", admin, func(conn *sql.Conn) error {
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

// quoteMySQL quotes a MySQL identifier.
func quoteMySQL(ident string) string {
	return "`" + strings.ReplaceAll(ident, "`", "``") + "`"
}
