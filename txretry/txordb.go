package txretry

import (
	"context"
	"database/sql"
	"reflect"
)

// DBTX is what sqlc's code generated for database/sql needs of a database
// handle (sqlc's own DBTX): *sql.DB, *sql.Conn and *sql.Tx have it, so
// that store.New(txretry.TxOrDB(ctx, db)) works.
type DBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// TxOrDB returns the *sql.Tx of the RunInTx call on db that ctx is inside
// (ctx is fn's context, or derived from it), and db itself otherwise: for a
// ctx in no call, or in calls on other handles only (a call on another
// handle is never mistaken for one on db). db is the handle given to
// RunInTx, typically a *sql.DB or a *sql.Conn. A repository method written
// against TxOrDB(ctx, db) thus runs in the caller's transaction when there
// is one and on db when there is none.
//
// The transaction is the running attempt's. A context kept after fn
// returned, or used by a goroutine that outlives fn, still gives that
// attempt's transaction, never db and never a later attempt's: once the
// attempt ended its statements fail with sql.ErrTxDone, so nothing runs
// outside the transaction by mistake. A *sql.Tx may be used from several
// goroutines while fn runs, but RunInTx commits as soon as fn returns: wait
// for them in fn.
//
// The call may be any library's on db built on database/sql (RunInTx,
// gormretry, sqlxretry, bunretry, an Adapter whose transaction is a SQLTx):
// TxOrDB returns the *sql.Tx under its transaction (one it embeds under an
// exported name, as *sqlx.Tx and bun.Tx do), so that repository code never
// runs outside the transaction its caller is in. The adapters' own TxOrDB
// are built on it. Only an Adapter whose transaction holds no *sql.Tx has
// none to give: TxOrDB then returns db.
func TxOrDB(ctx context.Context, db DBTX) DBTX {
	if v := callOn(ctx, db); v != nil {
		if t, ok := v.tx.(interface{ sqlTx() *sql.Tx }); ok {
			if tx := t.sqlTx(); tx != nil {
				return tx
			}
		}
	}
	return db
}

// sqlTx is the *sql.Tx that the library's transaction is or embeds
// (sqlx's *sqlx.Tx, bun's bun.Tx), nil if it has none.
func (t *SQLTx[T]) sqlTx() *sql.Tx {
	if tx, ok := any(t.Tx).(*sql.Tx); ok {
		return tx
	}
	return embeddedSQLTx(reflect.ValueOf(t.Tx), 4)
}

var sqlTxType = reflect.TypeFor[*sql.Tx]()

// embeddedSQLTx finds a *sql.Tx in v or among the fields that v embeds
// under exported names (sqlx.Tx's Tx, bun.Tx's Tx), depth levels deep at
// most.
func embeddedSQLTx(v reflect.Value, depth int) *sql.Tx {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		if v.Type() == sqlTxType {
			return v.Interface().(*sql.Tx)
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || depth == 0 {
		return nil
	}
	for i := range v.NumField() {
		if f := v.Type().Field(i); f.Anonymous && f.IsExported() {
			if tx := embeddedSQLTx(v.Field(i), depth-1); tx != nil {
				return tx
			}
		}
	}
	return nil
}

// TxFromContext is how an adapter finds the transaction of the call on its
// handle that ctx is inside, to give its users a TxOrDB: it returns the T
// that the adapter's Begin returned for the running attempt of the
// nearest such call, and true: the call that a nested call on handle
// joins. handle is compared with the calls' handles (AdapterHandle) as
// nested calls compare them; calls on other handles are skipped. It returns T's zero value and false when ctx (nil
// included) is inside no call on handle, or when that call's transaction
// is not a T (another adapter's, on the same handle).
//
// Like TxOrDB's, the transaction is the attempt's, and ended once that
// attempt ended: an adapter should hand it out as it is (its statements
// then fail), never its handle instead.
func TxFromContext[T Tx](ctx context.Context, handle any) (tx T, ok bool) {
	if v := callOn(ctx, handle); v != nil {
		tx, ok = v.tx.(T)
	}
	return tx, ok
}
