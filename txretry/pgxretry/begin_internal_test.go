package pgxretry

import (
	"database/sql"
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
