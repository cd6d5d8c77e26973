package main

import (
	"testing"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/dbserver/dbservertest"
)

// TestPublishedOncePerCommittedOrder places concurrent orders that conflict,
// with every driver, and checks the after-commit publish: each committed
// order is published exactly once, also when its call was retried, and no
// event is published for a refused call (ErrOutOfStock) or for an attempt
// that was rolled back (its order id, consumed by the rolled-back insert,
// is in no committed row). The test fails if no committed call was
// retried, since it would then prove nothing.
func TestPublishedOncePerCommittedOrder(t *testing.T) {
	for _, e := range []dbserver.Engine{dbserver.Postgres, dbserver.MySQL} {
		t.Run(e.String(), func(t *testing.T) {
			srv := dbservertest.Server(t, e)
			ns := dbservertest.Namespace(t, srv, "txretry_test_repository_publish")
			for _, d := range driversFor(e) {
				t.Run(storeOf[d], func(t *testing.T) {
					testPublishedOnce(t, ns, d)
				})
			}
		})
	}
}

// testPublishedOnce is one run of TestPublishedOncePerCommittedOrder.
func testPublishedOnce(t *testing.T, ns dbserver.Namespace, d driver) {
	// 48 orders of 2 units on average for 50 in stock: some are refused.
	rep := runDemo(t, ns, d, "-customers", "8", "-orders", "6", "-stock", "50")

	failed := 0
	for _, n := range rep.failed {
		failed += n
	}
	published := map[int64]int{} // order id → events
	for _, e := range rep.events {
		published[e.Order.ID]++
	}
	recorded := map[int64]bool{}
	for _, id := range rep.recordedIDs {
		recorded[id] = true
	}
	for _, id := range rep.placedIDs {
		if published[id] != 1 || !recorded[id] {
			t.Errorf("order %d: committed %v, published %d times; want committed and published once", id, recorded[id], published[id])
		}
	}
	if len(rep.events) != rep.placed || len(rep.recordedIDs) != rep.placed {
		t.Errorf("%d events and %d orders recorded for %d calls that committed; want one each per call",
			len(rep.events), len(rep.recordedIDs), rep.placed)
	}
	t.Logf("%d calls: %d committed, %d refused, %d failed; %d calls retried, %d of the committed; %d events",
		rep.placed+rep.outOfStock+failed, rep.placed, rep.outOfStock, failed, rep.retried, rep.publishedAfterRetry(), len(rep.events))
	if rep.outOfStock == 0 {
		t.Error("no call was refused: the run does not show that a failed call publishes nothing")
	}
	if rep.publishedAfterRetry() == 0 {
		t.Error("no committed call was retried: the run does not show that a retried call publishes once")
	}
}
