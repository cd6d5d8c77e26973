package txretry_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// A payment made once per key. The fake driver stands in for a database
// whose key table already holds the key of the second call, as it would
// after the first call committed: its insert (of the key and the call's
// marker) fails with a duplicate key.
func ExampleWithIdempotencyKey() {
	committed := map[string]bool{}
	drv := &fakedb.Driver{NoLog: true, OnExec: func(_ context.Context, _ int, q string, _ []driver.NamedValue) error {
		if rest, ok := strings.CutPrefix(q, "INSERT INTO payment_keys (token) VALUES ('"); ok {
			k, _, _ := strings.Cut(rest, "'")
			if committed[k] {
				return &fakedb.SQLStateError{Code: "23505"}
			}
			committed[k] = true // the fake commits whatever it is given
		}
		return nil
	}}
	db := drv.DB() // in real code: sql.Open("pgx", dsn) or sql.Open("mysql", dsn)
	defer db.Close()

	pay := func(key string) {
		// key comes from the client, made once per payment, before any retry.
		err := txretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
			// Debit, and store the receipt under key in the same transaction.
			_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 1")
			return err
		}, txretry.WithIdempotencyKey("payment_keys", key))
		switch {
		case errors.Is(err, txretry.ErrAlreadyCommitted):
			fmt.Println("already paid: load and return the stored receipt")
		case err != nil:
			fmt.Println("failed:", err)
		default:
			fmt.Println("paid")
		}
	}
	pay("order-42")
	pay("order-42") // the client's retry after a timeout
	// Output:
	// paid
	// already paid: load and return the stored receipt
}
