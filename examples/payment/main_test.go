package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/dbserver/dbservertest"
)

func TestMain(m *testing.M) { dbservertest.Main(m) }

// engines are the engines every test runs on, when reachable.
var engines = []dbserver.Engine{dbserver.Postgres, dbserver.MySQL}

// newPayments returns payments over db in a fresh namespace, with account 1
// opened with balance 1000.
func newPayments(t *testing.T, db *sql.DB, ns dbserver.Namespace) *Payments {
	t.Helper()
	p := NewPayments(db, ns)
	if err := p.Setup(context.Background(), 1000); err != nil {
		t.Fatal(err)
	}
	return p
}

// openDB opens the namespace with the engine's registered driver.
func openDB(t *testing.T, ns dbserver.Namespace) *sql.DB {
	t.Helper()
	db, err := sql.Open(ns.Engine.Driver(), ns.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestDemo runs the program's demo, which checks itself, on every server.
func TestDemo(t *testing.T) {
	for _, e := range engines {
		t.Run(e.String(), func(t *testing.T) {
			srv := dbservertest.Server(t, e)
			dbservertest.Namespace(t, srv, "txretry_test_payment_demo")
			o, err := parseFlags([]string{"-namespace", "txretry_test_payment_demo"}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out bytes.Buffer
			err = demo(ctx, srv, o, &out)
			t.Log("\n" + out.String())
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPayIsIdempotent asserts that the same key returns the same receipt
// and debits once, also under concurrency.
func TestPayIsIdempotent(t *testing.T) {
	for _, e := range engines {
		t.Run(e.String(), func(t *testing.T) {
			srv := dbservertest.Server(t, e)
			ns := dbservertest.Namespace(t, srv, "txretry_test_payment_idem")
			p := newPayments(t, openDB(t, ns), ns)
			ctx := context.Background()

			key := NewKey()
			first, made1, err1 := p.Pay(ctx, key, 1, 100)
			second, made2, err2 := p.Pay(ctx, key, 1, 100)
			if err := errors.Join(err1, err2); err != nil {
				t.Fatal(err)
			}
			want := Receipt{Key: key, Account: 1, Amount: 100, BalanceAfter: 900}
			if first != want || second != want || !made1 || made2 {
				t.Errorf("calls returned %+v (new=%v) and %+v (new=%v), want %+v twice, new only the first time",
					first, made1, second, made2, want)
			}

			if _, _, err := p.Pay(ctx, key, 1, 101); !errors.Is(err, ErrKeyReused) {
				t.Errorf("same key, other amount: error %v, want ErrKeyReused", err)
			}
			if _, _, err := p.Pay(ctx, NewKey(), 1, 5000); !errors.Is(err, ErrInsufficientFunds) {
				t.Errorf("too large a payment: error %v, want ErrInsufficientFunds", err)
			}

			key2 := NewKey()
			const n = 6
			var wg sync.WaitGroup
			var mu sync.Mutex
			made := 0
			for range n {
				wg.Go(func() {
					r, m, err := p.Pay(ctx, key2, 1, 100)
					mu.Lock()
					defer mu.Unlock()
					if err != nil || r.BalanceAfter != 800 {
						t.Errorf("concurrent call: %+v, %v; want balance after 800", r, err)
					}
					if m {
						made++
					}
				})
			}
			wg.Wait()
			if made != 1 {
				t.Errorf("%d of %d concurrent calls made the payment, want 1", made, n)
			}
			if b, err := p.Balance(ctx, 1); err != nil || b != 800 {
				t.Errorf("balance = %d, %v; want 800", b, err)
			}
		})
	}
}

// TestLongAndMixedCaseKeys: keys the key table stores hashed (long,
// mixed case) work like any other, and two keys that differ only in case
// are two payments, on MySQL too.
func TestLongAndMixedCaseKeys(t *testing.T) {
	for _, e := range engines {
		t.Run(e.String(), func(t *testing.T) {
			srv := dbservertest.Server(t, e)
			ns := dbservertest.Namespace(t, srv, "txretry_test_payment_keys")
			p := newPayments(t, openDB(t, ns), ns)
			ctx := context.Background()
			for _, key := range []string{strings.Repeat("k", 300), "Key-A", "key-a"} {
				for i := range 2 {
					_, made, err := p.Pay(ctx, key, 1, 10)
					if err != nil || made != (i == 0) {
						t.Fatalf("key of %d bytes, call %d: new=%v, %v", len(key), i+1, made, err)
					}
				}
			}
			if b, err := p.Balance(ctx, 1); err != nil || b != 970 {
				t.Errorf("balance = %d, %v; want 970 (three keys, each paid once)", b, err)
			}
		})
	}
}
