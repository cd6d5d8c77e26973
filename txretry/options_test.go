package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// TestOptionsStayWithTheirCall: calls without options share one default
// configuration, and a call with options, before or between them, must not
// change it.
func TestOptionsStayWithTheirCall(t *testing.T) {
	db := (&fakedb.Driver{OnExec: failFirst(1<<30, errSerialization)}).DB()
	defer db.Close()
	for _, tc := range []struct {
		opts []txretry.Option
		want int32
	}{
		{nil, txretry.DefaultMaxAttempts},
		{[]txretry.Option{txretry.WithMaxAttempts(2), txretry.WithoutContentionManager(), txretry.WithBackoff(txretry.Constant(0))}, 2},
		{nil, txretry.DefaultMaxAttempts},
		{[]txretry.Option{txretry.WithMaxAttempts(3)}, 3},
		{nil, txretry.DefaultMaxAttempts},
	} {
		var calls atomic.Int32
		err := txretry.RunInTx(context.Background(), db, execFn(&calls), tc.opts...)
		if !errors.Is(err, txretry.ErrRetriesExhausted) || calls.Load() != tc.want {
			t.Fatalf("with %d options: err = %v after %d attempts, want exhaustion after %d", len(tc.opts), err, calls.Load(), tc.want)
		}
	}
}

func TestTransactionOptionsReachTheDriver(t *testing.T) {
	f := newFixture(t, &fakedb.Driver{})
	err := txretry.RunInTx(context.Background(), f.db, func(context.Context, *sql.Tx) error { return nil },
		f.opts(txretry.WithIsolation(sql.LevelSerializable), txretry.WithReadOnly())...)
	got := f.drv.Stats().LastTxOptions
	if err != nil || got.Isolation != driver.IsolationLevel(sql.LevelSerializable) || !got.ReadOnly {
		t.Fatalf("err=%v options %+v, want serializable read-only", err, got)
	}
}

// The README's option table names each default's value beside its
// constant; a changed constant must change the table too.
func TestReadmeStatesTheDefaults(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		fmt.Sprintf("| `WithMaxAttempts(n)` | %d (`DefaultMaxAttempts`)", txretry.DefaultMaxAttempts),
		fmt.Sprintf("| `WithCommitTimeout(d)` | %d s (`DefaultCommitTimeout`)", int(txretry.DefaultCommitTimeout.Seconds())),
	} {
		if !strings.Contains(string(readme), row) {
			t.Errorf("README.md has no row starting %q", row)
		}
	}
}
