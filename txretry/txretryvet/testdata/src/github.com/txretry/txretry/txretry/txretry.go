// Package txretry is a stub of txretry's API for the analyzer's tests.
package txretry

import (
	"context"
	"database/sql"
)

type Option struct{}

type DB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

type DBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func RunInTx(ctx context.Context, db DB, fn func(ctx context.Context, tx *sql.Tx) error, opts ...Option) error {
	return nil
}

type Tx interface{ Commit() error }

type Adapter[T Tx] interface {
	Call(ctx context.Context, tx T) error
}

func Run[T Tx](ctx context.Context, a Adapter[T], opts ...Option) error { return nil }

func AfterCommit(ctx context.Context, f func(ctx context.Context)) {}

func TxOrDB(ctx context.Context, db DBTX) DBTX { return db }

func Attempt(ctx context.Context) int { return 1 }
