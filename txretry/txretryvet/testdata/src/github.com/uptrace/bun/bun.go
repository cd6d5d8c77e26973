// Package bun is a stub of bun's API for the analyzer's tests.
package bun

import (
	"context"
	"database/sql"
)

type InsertQuery struct{}

func (q *InsertQuery) Model(m any) *InsertQuery                                  { return q }
func (q *InsertQuery) Exec(ctx context.Context, dest ...any) (sql.Result, error) { return nil, nil }

type DB struct{}

func (db *DB) NewInsert() *InsertQuery { return nil }
func (db *DB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return nil, nil
}
func (db *DB) WithNamedArg(name string, value any) *DB { return db }

type Tx struct{}

func (tx Tx) NewInsert() *InsertQuery { return nil }
func (tx Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return nil, nil
}
