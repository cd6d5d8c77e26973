package bunretry

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/txretry/txretry/txretry"
)

// TxOrDB returns the bun.Tx of the RunInTx call on db's pool that ctx is
// inside (ctx is fn's context, or derived from it), and db itself
// otherwise: for a ctx in no call, or in calls on other pools only. As with
// nested calls, db's clones (WithNamedArg, WithQueryHook) find the call
// too.
//
// When the call on db's pool that ctx is inside is another library's
// (txretry.RunInTx, gormretry, sqlxretry), TxOrDB returns a bun.IDB on that
// call's *sql.Tx, so that repository code stays in the transaction its
// caller is in (bun makes no bun.Tx from a *sql.Tx of another library):
// its New… queries are db's, run on the transaction (as
// db.NewSelect().Conn(tx) runs them), with db's query hooks; its
// ExecContext, QueryContext and QueryRowContext format their arguments
// as db's do but, unlike them, call no query hook; its BeginTx and
// RunInTx, bun's savepoints, return an error matching
// txretry.ErrInvalidOption.
//
// As with txretry.TxOrDB, the transaction is the running attempt's: a
// context kept after fn returned still gives it, and its statements then
// fail with sql.ErrTxDone, never run on db.
func TxOrDB(ctx context.Context, db *bun.DB) bun.IDB {
	pool := poolOf(db)
	if pool == nil {
		return db
	}
	if tx, ok := txretry.TxFromContext[*txretry.SQLTx[bunTx]](ctx, pool); ok {
		return tx.Tx.Tx
	}
	if tx, ok := txretry.TxOrDB(ctx, pool).(*sql.Tx); ok {
		return foreignTx{db: db, tx: tx}
	}
	return db
}

// foreignTx is a bun.IDB on another library's *sql.Tx on db's pool.
type foreignTx struct {
	db *bun.DB
	tx *sql.Tx
}

var _ bun.IDB = foreignTx{}

func (t foreignTx) Dialect() schema.Dialect { return t.db.Dialect() }

func (t foreignTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, t.db.QueryGen().FormatQuery(query, args...))
}

func (t foreignTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, t.db.QueryGen().FormatQuery(query, args...))
}

func (t foreignTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(ctx, t.db.QueryGen().FormatQuery(query, args...))
}

func (t foreignTx) NewValues(model any) *bun.ValuesQuery { return t.db.NewValues(model).Conn(t.tx) }
func (t foreignTx) NewSelect() *bun.SelectQuery          { return t.db.NewSelect().Conn(t.tx) }
func (t foreignTx) NewInsert() *bun.InsertQuery          { return t.db.NewInsert().Conn(t.tx) }
func (t foreignTx) NewUpdate() *bun.UpdateQuery          { return t.db.NewUpdate().Conn(t.tx) }
func (t foreignTx) NewDelete() *bun.DeleteQuery          { return t.db.NewDelete().Conn(t.tx) }
func (t foreignTx) NewMerge() *bun.MergeQuery            { return t.db.NewMerge().Conn(t.tx) }
func (t foreignTx) NewRaw(query string, args ...any) *bun.RawQuery {
	return t.db.NewRaw(query, args...).Conn(t.tx)
}
func (t foreignTx) NewCreateTable() *bun.CreateTableQuery { return t.db.NewCreateTable().Conn(t.tx) }
func (t foreignTx) NewDropTable() *bun.DropTableQuery     { return t.db.NewDropTable().Conn(t.tx) }
func (t foreignTx) NewCreateIndex() *bun.CreateIndexQuery { return t.db.NewCreateIndex().Conn(t.tx) }
func (t foreignTx) NewDropIndex() *bun.DropIndexQuery     { return t.db.NewDropIndex().Conn(t.tx) }
func (t foreignTx) NewTruncateTable() *bun.TruncateTableQuery {
	return t.db.NewTruncateTable().Conn(t.tx)
}
func (t foreignTx) NewAddColumn() *bun.AddColumnQuery   { return t.db.NewAddColumn().Conn(t.tx) }
func (t foreignTx) NewDropColumn() *bun.DropColumnQuery { return t.db.NewDropColumn().Conn(t.tx) }

func (t foreignTx) BeginTx(context.Context, *sql.TxOptions) (bun.Tx, error) {
	return bun.Tx{}, errSavepoint
}

func (t foreignTx) RunInTx(context.Context, *sql.TxOptions, func(context.Context, bun.Tx) error) error {
	return errSavepoint
}

var errSavepoint = fmt.Errorf("%w: bunretry.TxOrDB: a savepoint (BeginTx, RunInTx) needs a bun.Tx, and the transaction of the call on this pool is another library's", txretry.ErrInvalidOption)
