package txretry

import (
	"context"
	"database/sql"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The database/sql adapter recognises pgx's rollback-at-commit by its text
// (it does not import pgx): the text must be pgx's. The integration module
// checks it against a real server through pgx's stdlib driver.
func TestPgxCommitRollbackMsgIsPgxs(t *testing.T) {
	if got := pgx.ErrTxCommitRollback.Error(); got != pgxCommitRollbackMsg {
		t.Fatalf("pgx.ErrTxCommitRollback reads %q, the adapter matches %q", got, pgxCommitRollbackMsg)
	}
}

// sqlFn is a database/sql fn.
type sqlFn = func(context.Context, *sql.Tx) error

// fnPointer is the code pointer of the function that the engine gets from
// RunInTx's adapter for fn (what keys the contention manager's domain).
func fnPointer(t *testing.T, fn sqlFn) uintptr {
	t.Helper()
	var a adapter = typed[*SQLTx[*sql.Tx]]{sqlAdapter{fn: fn}}
	got, ok := a.fn().(sqlFn)
	if !ok {
		t.Fatalf("the adapter's fn is a %T, want the caller's %T", a.fn(), fn)
	}
	return reflect.ValueOf(got).Pointer()
}

// RunInTx's adapter reports the caller's function itself, not a wrapper.
func TestSQLAdapterFuncIsTheCallersFn(t *testing.T) {
	called := false
	fn := func(context.Context, *sql.Tx) error { called = true; return nil }
	if got, want := fnPointer(t, fn), reflect.ValueOf(fn).Pointer(); got != want {
		t.Fatalf("Func's code pointer %#x, want fn's %#x", got, want)
	}
	var a adapter = typed[*SQLTx[*sql.Tx]]{sqlAdapter{fn: fn}}
	if err := a.fn().(sqlFn)(context.Background(), nil); err != nil || !called {
		t.Fatal("Func did not return fn")
	}
	if f := (typed[*SQLTx[*sql.Tx]]{struct{ Adapter[*SQLTx[*sql.Tx]] }{}}).fn(); f != nil {
		t.Fatalf("an adapter without Func gave %v, want nil", f)
	}
}

// Two closures of one source location have one code pointer, whatever
// they capture (one conflict domain), and two function literals have two.
func TestFuncPointerIsPerSourceLocation(t *testing.T) {
	var same []uintptr
	for i := range 3 {
		same = append(same, fnPointer(t, func(context.Context, *sql.Tx) error { _ = i; return nil }))
	}
	if same[0] != same[1] || same[1] != same[2] {
		t.Fatalf("closures of one literal: pointers %#x, want one", same)
	}
	other := fnPointer(t, func(context.Context, *sql.Tx) error { return sql.ErrNoRows })
	third := fnPointer(t, func(context.Context, *sql.Tx) error { return sql.ErrTxDone })
	if other == same[0] || other == third || third == same[0] {
		t.Fatalf("distinct literals share a pointer: %#x %#x %#x", same[0], other, third)
	}
}
