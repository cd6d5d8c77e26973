package pgxretry

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txretry/txretry/txretry"
)

// DBTX is what sqlc's code generated for pgx/v5 needs of a database handle
// (sqlc's own DBTX, CopyFrom and SendBatch included): *pgxpool.Pool,
// *pgx.Conn and pgx.Tx have it, so that store.New(pgxretry.TxOrDB(ctx,
// pool)) works.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TxOrDB returns the pgx.Tx of the RunInTx call on db that ctx is inside
// (ctx is fn's context, or derived from it), and db itself otherwise: for a
// ctx in no call, or in calls on other handles only. db is the handle given
// to RunInTx, typically a *pgxpool.Pool or a *pgx.Conn. The pgx.Tx is the
// one fn receives: it records server errors for COMMIT, and its Commit and
// Rollback return txretry.ErrTxEndedByFn.
//
// A pgx.Tx is one connection, which must not be used from several
// goroutines at once: use it on fn's goroutine, or hand it to one
// goroutine at a time. A context kept after fn returned still gives that
// attempt's transaction, never db and never a later attempt's: its
// statements then fail with pgx.ErrTxClosed, so nothing runs outside the
// transaction by mistake.
func TxOrDB(ctx context.Context, db DBTX) DBTX {
	if at, ok := txretry.TxFromContext[*attempt](ctx, db); ok {
		return at.fnTx
	}
	return db
}
