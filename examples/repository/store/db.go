package store

import (
	"context"
	"database/sql"
)

// DBTX is what Queries runs its statements on: *sql.DB, *sql.Conn and
// *sql.Tx all have these methods.
type DBTX interface {
	ExecContext(context.Context, string, ...interface{}) (sql.Result, error)
	QueryContext(context.Context, string, ...interface{}) (*sql.Rows, error)
	QueryRowContext(context.Context, string, ...interface{}) *sql.Row
}

// New returns the queries over db.
func New(db DBTX) *Queries {
	return &Queries{db: db}
}

// Queries runs the statements of query.sql.
type Queries struct {
	db DBTX
}

// WithTx returns the queries over the transaction tx.
func (q *Queries) WithTx(tx *sql.Tx) *Queries {
	return &Queries{
		db: tx,
	}
}
