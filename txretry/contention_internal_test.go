package txretry

import (
	"context"
	"database/sql"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// The default per-handle manager goes away with its handle.
func TestDefaultManagerIsDroppedWithItsHandle(t *testing.T) {
	var key uintptr
	func() {
		db := (&fakedb.Driver{}).DB()
		defer db.Close()
		key = uintptr(unsafe.Pointer(db))
		for range 2 {
			if err := RunInTx(context.Background(), db, func(context.Context, *sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		m := defaultManager(&sqlAdapter{db: db})
		if _, ok := managers.Load(key); !ok || m == nil || m != defaultManager(&sqlAdapter{db: db}) {
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
