package txretry

import (
	"context"
	"database/sql"
	"runtime"
	"testing"
	"time"

	"github.com/txretry/txretry/internal/fakedb"
)

func countManagers() int {
	n := 0
	managers.Range(func(any, any) bool { n++; return true })
	return n
}

// The default per-handle manager goes away with its handle.
func TestDefaultManagerIsDroppedWithItsHandle(t *testing.T) {
	before := countManagers()
	func() {
		db := (&fakedb.Driver{}).DB()
		defer db.Close()
		if err := RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if got := countManagers(); got != before+1 {
			t.Fatalf("%d managers, want %d: one per handle", got, before+1)
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); countManagers() != before; {
		if time.Now().After(deadline) {
			t.Fatalf("%d managers left after the handle was collected, want %d", countManagers(), before)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
