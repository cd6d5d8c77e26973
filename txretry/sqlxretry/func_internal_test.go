package sqlxretry

import (
	"context"
	"reflect"
	"testing"

	"github.com/jmoiron/sqlx"
)

// The adapter reports the caller's fn itself (its code pointer keys the
// call's conflict domain), not a wrapper.
func TestFuncIsTheCallersFn(t *testing.T) {
	fn := func(context.Context, *sqlx.Tx) error { return nil }
	got, ok := adapter{fn: fn}.Func().(func(context.Context, *sqlx.Tx) error)
	if !ok || reflect.ValueOf(got).Pointer() != reflect.ValueOf(fn).Pointer() {
		t.Fatalf("Func() = %T, want fn", adapter{fn: fn}.Func())
	}
}
