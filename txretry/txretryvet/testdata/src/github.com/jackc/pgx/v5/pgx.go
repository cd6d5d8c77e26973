// Package pgx is a stub of pgx's API for the analyzer's tests.
package pgx

import "context"

type CommandTag struct{}

type Rows interface {
	Next() bool
	Err() error
	Scan(dest ...any) error
	Close()
}

type Row interface{ Scan(dest ...any) error }

type Tx interface {
	Exec(ctx context.Context, sql string, args ...any) (CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) Row
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

type Conn struct{}

func (c *Conn) Exec(ctx context.Context, sql string, args ...any) (CommandTag, error) {
	return CommandTag{}, nil
}
func (c *Conn) Begin(ctx context.Context) (Tx, error) { return nil, nil }
func (c *Conn) Config() any                           { return nil }
