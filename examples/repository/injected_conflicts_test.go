package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
	"github.com/txretry/txretry/txretry/txretrytest"
)

// forEachDriver runs test with each driver on each engine, in a namespace
// of its own.
func forEachDriver(t *testing.T, name string, test func(t *testing.T, ns dbserver.Namespace, d driver)) {
	for _, e := range []dbserver.Engine{dbserver.Postgres, dbserver.MySQL} {
		t.Run(e.String(), func(t *testing.T) {
			srv := dbservertest.Server(t, e)
			ns := dbservertest.Namespace(t, srv, name)
			for _, d := range driversFor(e) {
				t.Run(storeOf[d], func(t *testing.T) { test(t, ns, d) })
			}
		})
	}
}

// TestInjectedConflicts runs the demo's orders under
// txretrytest.InjectConflicts(t, 1): one after the other, every order's
// call runs exactly twice (one injected 40001 each), is published once, by
// its second attempt, and the stock holds; concurrently (with real
// conflicts too), every committed order ran at least twice, was published
// once, and the stock holds.
func TestInjectedConflicts(t *testing.T) {
	forEachDriver(t, "txretry_test_repository_inject", func(t *testing.T, ns dbserver.Namespace, d driver) {
		txretrytest.InjectConflicts(t, 1)
		t.Run("sequential", func(t *testing.T) {
			rep := runDemo(t, ns, d, "-customers", "1", "-orders", "6", "-stock", "100")
			if !rep.ok() || rep.placed != 6 {
				t.Errorf("invariant %v, %d orders placed; want it kept and all 6 placed", rep.ok(), rep.placed)
			}
			if rep.attempts != 12 || !maps.Equal(rep.retries, map[string]int{"40001": 6}) {
				t.Errorf("%d attempts, retryable errors %v; want 12 and one 40001 per order", rep.attempts, rep.retries)
			}
			for _, e := range rep.events {
				if e.Attempt != 2 {
					t.Errorf("order %d published by attempt %d, want 2", e.Order.ID, e.Attempt)
				}
			}
		})
		t.Run("concurrent", func(t *testing.T) {
			rep := runDemo(t, ns, d, "-customers", "8", "-orders", "4", "-stock", "40")
			if !rep.ok() || len(rep.failed) != 0 || rep.placed == 0 {
				t.Errorf("invariant %v, %d placed, failed %v; want it kept, some placed, none failed", rep.ok(), rep.placed, rep.failed)
			}
			for _, e := range rep.events {
				if e.Attempt < 2 {
					t.Errorf("order %d published by attempt %d, want 2 or later", e.Order.ID, e.Attempt)
				}
			}
		})
	})
}

func runDemo(t *testing.T, ns dbserver.Namespace, d driver, args ...string) report {
	t.Helper()
	o, err := parseFlags(args, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := demo(ctx, ns, d, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// publishInFn is PlaceOrder done wrong: the event is published inside fn,
// by every attempt, instead of in an AfterCommit hook.
func publishInFn(svc Service) func(ctx context.Context, customer, sku string, quantity int64) (Order, error) {
	return func(ctx context.Context, customer, sku string, quantity int64) (Order, error) {
		var order Order
		var err error
		switch s := svc.(type) {
		case *PostgresService:
			err = txretry.RunInTx(ctx, s.db, func(ctx context.Context, _ *sql.Tx) error {
				return placeAndPublish(ctx, &order, s.events, s.recordOrder, s.reserveStock, customer, sku, quantity)
			}, s.opts...)
		case *MySQLService:
			err = txretry.RunInTx(ctx, s.db, func(ctx context.Context, _ *sql.Tx) error {
				return placeAndPublish(ctx, &order, s.events, s.recordOrder, s.reserveStock, customer, sku, quantity)
			}, s.opts...)
		case *PgxService:
			err = pgxretry.RunInTx(ctx, s.pool, func(ctx context.Context, _ pgx.Tx) error {
				return placeAndPublish(ctx, &order, s.events, s.recordOrder, s.reserveStock, customer, sku, quantity)
			}, s.opts...)
		default:
			err = fmt.Errorf("no wrong variant for %T", svc)
		}
		return order, err
	}
}

// placeAndPublish is publishInFn's fn: the bug is the Publish call.
func placeAndPublish(ctx context.Context, order *Order, events *Publisher,
	record func(ctx context.Context, customer, sku string, quantity int64) (Order, error),
	reserve func(ctx context.Context, sku string, quantity int64) error,
	customer, sku string, quantity int64) error {
	var err error
	if *order, err = record(ctx, customer, sku, quantity); err != nil {
		return err
	}
	events.Publish(OrderPlaced{Order: *order, Attempt: txretry.Attempt(ctx)})
	return reserve(ctx, sku, quantity)
}

// placeOrders places three orders of one customer with place and returns
// what publishedOnce checks: the ids returned, the ids recorded, the events.
func placeOrders(t *testing.T, ns dbserver.Namespace, d driver, wrong bool) report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	events := &Publisher{}
	svc, closeService, err := openService(ctx, ns, d, 2, events)
	if err != nil {
		t.Fatal(err)
	}
	defer closeService()
	if err := svc.Setup(ctx, sku, 10); err != nil {
		t.Fatal(err)
	}
	place := svc.PlaceOrder
	if wrong {
		place = publishInFn(svc)
	}
	var rep report
	for range 3 {
		order, err := place(ctx, "customer", sku, 1)
		if err != nil {
			t.Fatal(err)
		}
		rep.placedIDs = append(rep.placedIDs, order.ID)
	}
	orders, err := svc.Orders(ctx, "customer")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range orders {
		rep.recordedIDs = append(rep.recordedIDs, o.ID)
	}
	rep.events = events.Events()
	return rep
}

// TestInjectedConflictsCatchPublishInFn: the check that every committed
// order is published once passes for PlaceOrder under InjectConflicts, and
// fails for the wrong variant that publishes inside fn, which passes it
// when nothing conflicts.
func TestInjectedConflictsCatchPublishInFn(t *testing.T) {
	forEachDriver(t, "txretry_test_repository_inject_fn", func(t *testing.T, ns dbserver.Namespace, d driver) {
		if rep := placeOrders(t, ns, d, true); !rep.publishedOnce() {
			t.Errorf("publishing in fn, no conflict: events %+v; want each order once (no retry happened)", rep.events)
		}
		t.Run("injected", func(t *testing.T) {
			txretrytest.InjectConflicts(t, 1)
			if rep := placeOrders(t, ns, d, false); !rep.publishedOnce() {
				t.Errorf("PlaceOrder: events %+v for orders %v; want each once", rep.events, rep.placedIDs)
			}
			rep := placeOrders(t, ns, d, true)
			if rep.publishedOnce() || len(rep.events) != 6 {
				t.Errorf("publishing in fn: events %+v for orders %v; want the check to fail, with 6 events for 3 orders", rep.events, rep.placedIDs)
			}
		})
	})
}
