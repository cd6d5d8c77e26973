package sqlxretry

import (
	"context"
	"database/sql"
	"reflect"

	"github.com/jmoiron/sqlx"

	"github.com/txretry/txretry/txretry"
)

// DBTX is what *sqlx.DB and *sqlx.Tx have in common for repository code:
// sqlx.ExtContext (for sqlx.GetContext, sqlx.NamedExecContext and the
// like), sqlc's database/sql methods (txretry.DBTX), GetContext,
// SelectContext and NamedExecContext.
type DBTX interface {
	sqlx.ExtContext
	txretry.DBTX
	GetContext(ctx context.Context, dest any, query string, args ...any) error
	SelectContext(ctx context.Context, dest any, query string, args ...any) error
	NamedExecContext(ctx context.Context, query string, arg any) (sql.Result, error)
}

var (
	_ DBTX = (*sqlx.DB)(nil)
	_ DBTX = (*sqlx.Tx)(nil)
	_ DBTX = boundTx{}
)

// TxOrDB returns the *sqlx.Tx of the RunInTx call on db's pool that ctx is
// inside (ctx is fn's context, or derived from it), and db itself
// otherwise: for a ctx in no call, or in calls on other pools only. As with
// nested calls, db's copies (db.Unsafe(), another sqlx.NewDb on the pool)
// find the call too.
//
// When the call on db's pool that ctx is inside is another library's
// (txretry.RunInTx, gormretry, bunretry), TxOrDB returns a DBTX on that
// call's *sql.Tx, so that repository code stays in the transaction its
// caller is in: a *sqlx.Tx (sqlx makes none from a *sql.Tx of another
// library) with db's Mapper and db.Unsafe()'s leniency, whose
// DriverName, Rebind, BindNamed and NamedExecContext are db's.
//
// As with txretry.TxOrDB, the transaction is the running attempt's: a
// context kept after fn returned still gives it, and its statements then
// fail with sql.ErrTxDone, never run on db.
func TxOrDB(ctx context.Context, db *sqlx.DB) DBTX {
	if db == nil || db.DB == nil {
		return db
	}
	if tx, ok := txretry.TxFromContext[*txretry.SQLTx[*sqlx.Tx]](ctx, db.DB); ok {
		return tx.Tx
	}
	if tx, ok := txretry.TxOrDB(ctx, db.DB).(*sql.Tx); ok {
		return foreignTx(db, tx)
	}
	return db
}

// boundTx is a *sqlx.Tx over another library's *sql.Tx, bound through db:
// the *sqlx.Tx's driver name, which sqlx sets only in db.BeginTxx, would
// be empty, and with it Rebind and named parameters wrong.
type boundTx struct {
	*sqlx.Tx
	db *sqlx.DB
}

func foreignTx(db *sqlx.DB, tx *sql.Tx) boundTx {
	stx := &sqlx.Tx{Tx: tx, Mapper: db.Mapper}
	if isUnsafe(db) {
		stx = stx.Unsafe()
	}
	return boundTx{Tx: stx, db: db}
}

// isUnsafe reports whether db is a db.Unsafe() copy, a flag sqlx keeps
// unexported; it is read, never written.
func isUnsafe(db *sqlx.DB) bool {
	f := reflect.ValueOf(db).Elem().FieldByName("unsafe")
	return f.IsValid() && f.Kind() == reflect.Bool && f.Bool()
}

func (t boundTx) DriverName() string     { return t.db.DriverName() }
func (t boundTx) Rebind(q string) string { return t.db.Rebind(q) }

func (t boundTx) BindNamed(q string, arg any) (string, []any, error) { return t.db.BindNamed(q, arg) }

func (t boundTx) NamedExecContext(ctx context.Context, q string, arg any) (sql.Result, error) {
	q, args, err := t.db.BindNamed(q, arg)
	if err != nil {
		return nil, err
	}
	return t.ExecContext(ctx, q, args...)
}
