package slogretry_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/fakeclock"
	"github.com/txretry/txretry/txretry/internal/fakedb"
	"github.com/txretry/txretry/txretry/slogretry"
)

func Example() {
	// A database whose first COMMIT reports a serialization failure.
	d := &fakedb.Driver{OnCommit: func(n int) error {
		if n == 1 {
			return &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
		}
		return nil
	}}
	db := d.DB()
	defer db.Close()

	// A text logger without timestamps, so that the output is stable.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))

	err := txretry.RunInTx(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE account SET balance = balance - 10 WHERE id = 1")
		return err
	},
		txretry.WithLabel("debit"),
		txretry.WithObserver(slogretry.New(logger)),
		// Only to make the example's output stable: no backoff, a clock
		// that does not sleep, the domain's spacing (1 ms) in full.
		txretry.WithBackoff(txretry.Constant(0)),
		txretry.WithClock(&fakeclock.Clock{}),
		txretry.WithRand(func() float64 { return 1 }),
	)
	fmt.Println("err:", err)
	// Output:
	// level=INFO msg="txretry: retryable failure" label=debit attempt=1 code=40001 err_type=fakedb.SQLStateError duration=0s
	// level=INFO msg="txretry: call finished" label=debit outcome=committed attempts=2 duration=1ms waited=1ms queued=0s
	// err: <nil>
}
