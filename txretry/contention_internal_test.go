package txretry

import (
	"context"
	"database/sql"
	"runtime"
	"testing"
	"time"
	"unsafe"
	"weak"

	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// The default per-handle manager goes away with its handle.
func TestDefaultManagerIsDroppedWithItsHandle(t *testing.T) {
	var key weak.Pointer[byte]
	func() {
		db := (&fakedb.Driver{}).DB()
		defer db.Close()
		key = weak.Make((*byte)(unsafe.Pointer(db))) // as ManagerFor keys it
		for range 2 {
			if err := RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		m := ManagerFor(db)
		if _, ok := managers.Load(key); !ok || m == nil || m != ManagerFor(db) || m != (sqlAdapter{db: db}).ContentionManager() {
			t.Fatal("the handle has no default manager, or a new one per call")
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, ok := managers.Load(key); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the manager outlived its collected handle")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
