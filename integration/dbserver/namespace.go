package dbserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// Namespace is where a program keeps its tables, apart from everything else
// on the server.
type Namespace struct {
	// Name is the namespace's name, as given to Server.Namespace.
	Name string
	// Engine is the server's engine.
	Engine Engine
	// DSN connects so that unqualified table names resolve in the
	// namespace: the PostgreSQL DSN with search_path set to the schema,
	// or the MySQL DSN naming the namespace's database (with
	// parseTime=true). Do not print it.
	DSN string
	// Prefix is prepended to table names by Table: empty, unless the
	// namespace is a prefix of table names in the DSN's own database or
	// schema because a schema or database could not be created.
	Prefix string
	// Where describes the namespace for output, for example
	// `schema "txretry_demo"`.
	Where string

	srv *Server
}

// Table returns the name under which the program's table name lives in the
// namespace. Names are plain identifiers, safe to put into SQL text.
func (n Namespace) Table(name string) string { return n.Prefix + name }

// nameRE is what namespace names may look like: one lower-case identifier,
// so that it needs no quoting on any engine.
var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// ErrBadName is returned for a namespace name that is not a lower-case
// identifier of at most 40 characters.
var ErrBadName = errors.New("dbserver: namespace name must be a lower-case identifier of at most 40 characters")

// Namespace creates, if needed, the namespace called name and returns it:
// on PostgreSQL a schema, on MySQL a database. When the server refuses to
// create it (no privilege), the namespace falls back to the table-name
// prefix name+"_" in the DSN's own database or schema. The tables in it are
// the program's to drop and create.
func (s *Server) Namespace(ctx context.Context, name string) (Namespace, error) {
	if !nameRE.MatchString(name) {
		return Namespace{}, fmt.Errorf("%w: %q", ErrBadName, name)
	}
	if s.Engine == Postgres {
		return s.postgresNamespace(ctx, name)
	}
	return s.mysqlNamespace(ctx, name)
}

// postgresNamespace creates schema name. Concurrent CREATE SCHEMA IF NOT
// EXISTS can fail with a unique violation on the catalog, so the creation
// is serialized with a transaction-scoped advisory lock.
func (s *Server) postgresNamespace(ctx context.Context, name string) (Namespace, error) {
	ns := Namespace{Name: name, Engine: Postgres, srv: s}
	err := withDB(ctx, "pgx", s.DSN, func(db *sql.DB) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "txretry examples: "+name); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+name); err != nil {
			return err
		}
		return tx.Commit()
	})
	pgErr, isPgErr := errors.AsType[*pgconn.PgError](err)
	switch {
	case err == nil:
		dsn, err := withPostgresParam(s.DSN, "search_path", name)
		if err != nil {
			return Namespace{}, err
		}
		ns.DSN, ns.Where = dsn, fmt.Sprintf("schema %q", name)
		return ns, nil
	case isPgErr && pgErr.Code == "42501": // insufficient_privilege
		ns.DSN, ns.Prefix = s.DSN, name+"_"
		ns.Where = fmt.Sprintf("tables %s_* in the DSN's schema", name)
		return ns, nil
	default:
		return Namespace{}, fmt.Errorf("create schema %s: %w", name, err)
	}
}

// mysqlNamespace creates database name, or falls back to a prefix in the
// DSN's database when the server refuses.
func (s *Server) mysqlNamespace(ctx context.Context, name string) (Namespace, error) {
	ns := Namespace{Name: name, Engine: MySQL, srv: s}
	cfg, err := mysql.ParseDSN(s.DSN)
	if err != nil {
		return Namespace{}, err
	}
	cfg.ParseTime = true
	cfg.MultiStatements = false
	err = withDB(ctx, "mysql", s.DSN, func(db *sql.DB) error {
		_, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+name+" CHARACTER SET utf8mb4")
		return err
	})
	_, refused := errors.AsType[*mysql.MySQLError](err)
	switch {
	case err == nil:
		ns.Where = fmt.Sprintf("database %s", name)
		cfg.DBName = name
	case refused && cfg.DBName != "":
		// Typically 1044 (access denied to create a database).
		ns.Prefix = name + "_"
		ns.Where = fmt.Sprintf("tables %s_* in database %s", name, cfg.DBName)
	default:
		return Namespace{}, fmt.Errorf("create database %s: %w", name, err)
	}
	ns.DSN = cfg.FormatDSN()
	return ns, nil
}

// Drop removes the namespace and everything in it: the schema or database,
// or the tables and routines with its prefix. Smoke tests call it to leave
// the server as they found it.
func (n Namespace) Drop(ctx context.Context) error {
	switch {
	case n.srv == nil:
		return errors.New("dbserver: Drop of a Namespace not made by Server.Namespace")
	case n.Prefix != "":
		return n.dropPrefixed(ctx)
	case n.Engine == Postgres:
		return withDB(ctx, "pgx", n.srv.DSN, func(db *sql.DB) error {
			_, err := db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+n.Name+" CASCADE")
			return err
		})
	default:
		return withDB(ctx, "mysql", n.srv.DSN, func(db *sql.DB) error {
			_, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+n.Name)
			return err
		})
	}
}

// dropPrefixed drops the tables (and, on MySQL, the procedures) whose names
// start with the namespace's prefix.
func (n Namespace) dropPrefixed(ctx context.Context) error {
	like := strings.ReplaceAll(n.Prefix, "_", `\_`) + "%"
	listTables := "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE $1"
	listRoutines := ""
	if n.Engine == MySQL {
		listTables = "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE ?"
		listRoutines = "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME LIKE ?"
	}
	return withDB(ctx, n.Engine.Driver(), n.DSN, func(db *sql.DB) error {
		tables, err := names(ctx, db, listTables, like)
		if err != nil {
			return err
		}
		var routines []string
		if listRoutines != "" {
			if routines, err = names(ctx, db, listRoutines, like); err != nil {
				return err
			}
		}
		for _, t := range tables {
			stmt := "DROP TABLE IF EXISTS " + t
			if n.Engine == Postgres {
				stmt += " CASCADE"
			}
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		for _, r := range routines {
			if _, err := db.ExecContext(ctx, "DROP PROCEDURE IF EXISTS "+r); err != nil {
				return err
			}
		}
		return nil
	})
}

// names runs a query that lists names; only plain identifiers are returned,
// so that they can be put into SQL text.
func names(ctx context.Context, db *sql.DB, query string, args ...any) (list []string, err error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, rows.Close()) }()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		if identRE.MatchString(name) {
			list = append(list, name)
		}
	}
	return list, rows.Err()
}

// identRE matches identifiers that need no quoting.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// withPostgresParam returns the PostgreSQL DSN with the run-time parameter
// key set to value: a query parameter of a URL, or a keyword appended to a
// keyword/value DSN (a later keyword overrides an earlier one).
func withPostgresParam(dsn, key, value string) (string, error) {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " " + key + "=" + value, nil
	}
	u, err := parseURL(dsn)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String(), nil
}
