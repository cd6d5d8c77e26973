package gormretry

import (
	"context"
	"reflect"
	"testing"

	"gorm.io/gorm"
)

// The adapter reports the caller's fn itself (its code pointer keys the
// call's conflict domain), not a wrapper.
func TestFuncIsTheCallersFn(t *testing.T) {
	fn := func(context.Context, *gorm.DB) error { return nil }
	got, ok := adapter{fn: fn}.Func().(func(context.Context, *gorm.DB) error)
	if !ok || reflect.ValueOf(got).Pointer() != reflect.ValueOf(fn).Pointer() {
		t.Fatalf("Func() = %T, want fn", adapter{fn: fn}.Func())
	}
}
