package pgxretry

import (
	"context"
	"database/sql"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txretry/txretry/txretry"
)

// A lock timeout travels in BeginQuery, after the BEGIN that pgx would
// have sent for the other options, in the same message.
func TestLockTimeoutIsSentWithBegin(t *testing.T) {
	tests := []struct {
		o    txretry.TxOptions
		want string
	}{
		{txretry.TxOptions{Isolation: sql.LevelSerializable}, ""},
		{txretry.TxOptions{Isolation: sql.LevelSerializable, LockTimeout: 50 * time.Millisecond},
			"begin isolation level serializable; SET LOCAL lock_timeout = 50"},
		{txretry.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true, LockTimeout: 100 * time.Millisecond},
			"begin isolation level repeatable read read only; SET LOCAL lock_timeout = 100"},
		{txretry.TxOptions{LockTimeout: time.Millisecond}, "begin; SET LOCAL lock_timeout = 1"},
	}
	for _, tt := range tests {
		opts, err := txOptions(tt.o)
		if err != nil {
			t.Fatalf("txOptions(%+v): %v", tt.o, err)
		}
		if opts.BeginQuery != tt.want {
			t.Errorf("txOptions(%+v).BeginQuery = %q, want %q", tt.o, opts.BeginQuery, tt.want)
		}
		if tt.want == "" && (opts.IsoLevel != pgx.Serializable || opts.AccessMode != "") {
			t.Errorf("txOptions(%+v) = %+v", tt.o, opts)
		}
	}
}

// The adapter reports the caller's fn itself, not the call's wrapper.
func TestFuncIsTheCallersFn(t *testing.T) {
	fn := func(context.Context, pgx.Tx) error { return nil }
	var f txretry.AdapterFunc = adapter{fn: fn}
	got, ok := f.Func().(func(context.Context, pgx.Tx) error)
	if !ok || reflect.ValueOf(got).Pointer() != reflect.ValueOf(fn).Pointer() {
		t.Fatalf("Func() = %T %v, want fn", f.Func(), f.Func())
	}
}
