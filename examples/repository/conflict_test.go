package main

import (
	"context"
	"database/sql"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/txretry"
)

// TestConflictRetried makes one order conflict for certain, with each
// driver, and checks that txretry ran it again: another transaction (the
// "rival") records two orders of 1 unit and holds a lock on the product's
// row while the order, which has recorded itself, reads the stock and then
// waits to write it.
//
//   - PostgreSQL: the rival has updated the row; once it commits, the
//     order's UPDATE fails with 40001 (SERIALIZABLE: the row changed since
//     the order's snapshot).
//   - MySQL/MariaDB: the rival holds a shared lock (a locking read, and
//     the foreign key check of its insert); the order's SERIALIZABLE read
//     takes one too, and its UPDATE waits for the rival's. When the rival
//     updates the row as well, InnoDB finds the deadlock and rolls back the
//     lighter transaction, the order, which has written one row to the
//     rival's two: 1213.
//
// The order's second attempt reads the stock the rival left and succeeds;
// nothing is lost, and the order is published once, by the second attempt
// (the first attempt's publish, registered before its UPDATE failed, is
// dropped).
func TestConflictRetried(t *testing.T) {
	tests := []struct {
		engine dbserver.Engine
		code   string
	}{
		{dbserver.Postgres, "40001"},
		{dbserver.MySQL, "1213"},
	}
	for _, tt := range tests {
		t.Run(tt.engine.String(), func(t *testing.T) {
			srv := dbservertest.Server(t, tt.engine)
			ns := dbservertest.Namespace(t, srv, "txretry_test_repository_conflict")
			for _, d := range driversFor(tt.engine) {
				t.Run(storeOf[d], func(t *testing.T) {
					testConflictRetried(t, ns, d, tt.code)
				})
			}
		})
	}
}

// testConflictRetried is one run of TestConflictRetried.
func testConflictRetried(t *testing.T, ns dbserver.Namespace, d driver, code string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs := &observer{retries: map[string]int{}}
	events := &Publisher{}
	// The rival holds its lock until the test has seen the order wait for
	// it, which can take longer than pgxretry's default lock timeout
	// (50 ms): without WithLockTimeout(0) the order could also be retried
	// on 55P03, by timing.
	svc, closeService, err := openService(ctx, ns, d, 2, events,
		txretry.WithIsolation(sql.LevelSerializable), txretry.WithObserver(obs), txretry.WithLockTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	defer closeService()
	if err := svc.Setup(ctx, sku, 10); err != nil {
		t.Fatal(err)
	}

	db, err := sql.Open(ns.Engine.Driver(), ns.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rival, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rival.Rollback() //nolint:errcheck // a no-op after Commit
	var rivalID int64
	sessionID := "SELECT pg_backend_pid()"
	if ns.Engine == dbserver.MySQL {
		sessionID = "SELECT CONNECTION_ID()"
	}
	if err := rival.QueryRowContext(ctx, sessionID).Scan(&rivalID); err != nil {
		t.Fatal(err)
	}
	exec := func(query string, args ...any) {
		t.Helper()
		if _, err := rival.ExecContext(ctx, ns.Engine.Rebind(query), args...); err != nil {
			t.Fatalf("rival: %v", err)
		}
	}
	exec("INSERT INTO orders (customer, sku, quantity) VALUES ('rival', ?, 1), ('rival', ?, 1)", sku, sku)
	if ns.Engine == dbserver.Postgres {
		exec("UPDATE products SET stock = stock - 2 WHERE sku = ?", sku)
	} else {
		exec("SELECT stock FROM products WHERE sku = ? LOCK IN SHARE MODE", sku)
	}

	placed := make(chan error, 1)
	var order Order
	go func() {
		var err error
		order, err = svc.PlaceOrder(ctx, "customer", sku, 2)
		placed <- err
	}()
	waitForLockWait(t, db, ns.Engine, rivalID)
	if ns.Engine == dbserver.MySQL {
		// The deadlock: InnoDB rolls back the order, and this UPDATE
		// goes through.
		exec("UPDATE products SET stock = stock - 2 WHERE sku = ?", sku)
	}
	if err := rival.Commit(); err != nil {
		t.Fatalf("rival: %v", err)
	}
	if err := <-placed; err != nil {
		t.Fatalf("PlaceOrder = %v", err)
	}

	obs.mu.Lock()
	attempts, retries := obs.attempts, maps.Clone(obs.retries)
	obs.mu.Unlock()
	if attempts != 2 || len(retries) != 1 || retries[code] != 1 {
		t.Errorf("%d attempts, retryable errors %v; want 2 attempts, one retry on %s", attempts, retries, code)
	}
	if got, want := events.Events(), []OrderPlaced{{Order: order, Attempt: 2}}; !slices.Equal(got, want) {
		t.Errorf("published %+v, want %+v: the order once, by the attempt that committed", got, want)
	}
	stock, ordered, err := svc.Stock(ctx, sku)
	if err != nil {
		t.Fatal(err)
	}
	if stock != 6 || ordered != 4 {
		t.Errorf("stock %d, %d units ordered; want 6 and 4 (10 - 2 by the rival - 2 by the order)", stock, ordered)
	}
}

// waitForLockWait waits until a transaction waits for a lock that the
// rival, session id rivalID, holds: the order's.
func waitForLockWait(t *testing.T, db *sql.DB, e dbserver.Engine, rivalID int64) {
	t.Helper()
	query := "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))"
	if e == dbserver.MySQL {
		// The namespace is a database of this test's own: a lock wait
		// in it is the order's.
		query = `SELECT COUNT(*) FROM information_schema.INNODB_TRX t
			JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
			WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE() AND p.ID <> ?`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := db.QueryRowContext(t.Context(), query, rivalID).Scan(&n); err != nil {
			t.Fatalf("look for a lock wait: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the order did not wait for the rival's lock within 10s")
		}
		// InnoDB refreshes what INNODB_TRX shows only when it was not
		// read for 100 ms: polling faster would never see the wait.
		time.Sleep(150 * time.Millisecond)
	}
}
