// Package sqlx is a stub of sqlx's API for the analyzer's tests.
package sqlx

import (
	"context"
	"database/sql"
)

type DB struct{ *sql.DB }

func (db *DB) GetContext(ctx context.Context, dest any, query string, args ...any) error { return nil }
func (db *DB) Unsafe() *DB                                                               { return db }

type Tx struct{ *sql.Tx }

func (tx *Tx) GetContext(ctx context.Context, dest any, query string, args ...any) error { return nil }
func (tx *Tx) SelectContext(ctx context.Context, dest any, query string, args ...any) error {
	return nil
}
