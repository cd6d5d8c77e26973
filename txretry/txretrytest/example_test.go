package txretrytest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/txretrytest"
)

// placeOrder records an order and sends its confirmation mail, in fn (the
// bug: a retry sends it again) or in an AfterCommit hook.
func placeOrder(ctx context.Context, db *sql.DB, mails *[]string, mailInFn bool) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (1)"); err != nil {
			return err
		}
		send := func(context.Context) { *mails = append(*mails, "order 1 confirmed") }
		if mailInFn {
			send(ctx)
		} else {
			txretry.AfterCommit(ctx, send)
		}
		return nil
	})
}

// A test that catches a side effect done in fn: with one injected conflict
// per call, the mail sent from fn goes out twice, while the one sent from
// AfterCommit goes out once. In a test, txretrytest.InjectConflicts(t, 1)
// does the same for every call of the process.
func ExampleWithConflicts() {
	db := (&fakedb.Driver{}).DB() // in a test: the real database
	defer db.Close()
	ctx := txretrytest.WithConflicts(context.Background(), 1)

	for _, mailInFn := range []bool{true, false} {
		var mails []string
		err := placeOrder(ctx, db, &mails, mailInFn)
		fmt.Printf("mail sent in fn: %v, err: %v, mails: %d\n", mailInFn, err, len(mails))
	}
	// Output:
	// mail sent in fn: true, err: <nil>, mails: 2
	// mail sent in fn: false, err: <nil>, mails: 1
}

// A test of a WithVerify callback both ways: the first COMMIT of the call
// is reported lost after the transaction committed, then after it rolled
// back. The callback looks the order up; committed, the call returns nil
// at once; not committed, fn runs again.
func ExampleWithLostCommits() {
	orders := 0 // the committed orders: what the verifier looks up
	drv := &fakedb.Driver{OnCommit: func(int) error { orders++; return nil }}
	db := drv.DB()
	defer db.Close()

	for _, committed := range []bool{true, false} {
		orders = 0
		ctx := txretrytest.WithLostCommits(context.Background(), committed)
		attempts, verified := 0, 0
		err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			attempts = txretry.Attempt(ctx)
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (id) VALUES (1)")
			return err
		}, txretry.WithVerify(func(ctx context.Context) (bool, error) {
			verified++
			return orders > 0, nil
		}))
		fmt.Printf("committed: %v, verified %d, attempts %d, orders %d, err: %v\n", committed, verified, attempts, orders, err)
	}

	// Without a verifier the call reports the commit uncertain.
	err := txretry.RunInTx(txretrytest.WithLostCommits(context.Background(), true), db,
		func(context.Context, *sql.Tx) error { return nil })
	fmt.Println(errors.Is(err, txretry.ErrCommitUncertain), errors.Is(err, txretrytest.ErrInjected))
	// Output:
	// committed: true, verified 1, attempts 1, orders 1, err: <nil>
	// committed: false, verified 1, attempts 2, orders 1, err: <nil>
	// true true
}
