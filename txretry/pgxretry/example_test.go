package pgxretry_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// In real code db is a *pgxpool.Pool or a *pgx.Conn. Here a stand-in that
// any user can write satisfies pgxretry.Beginner: its first COMMIT fails
// with a serialization failure, as PostgreSQL's does under SERIALIZABLE.
func ExampleRunInTx() {
	db := &flakyDB{}
	err := pgxretry.RunInTx(context.Background(), db, func(ctx context.Context, tx pgx.Tx) error {
		fmt.Println("attempt", txretry.Attempt(ctx))
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - $1 WHERE id = $2", 10, 1)
		return err
	}, txretry.WithIsolation(sql.LevelSerializable), txretry.WithBackoff(txretry.Constant(0)))
	fmt.Println("err:", err)
	// Output:
	// attempt 1
	// attempt 2
	// err: <nil>
}

// flakyDB begins transactions whose first COMMIT reports SQLSTATE 40001.
type flakyDB struct{ commits int }

func (d *flakyDB) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) {
	return &flakyTx{db: d}, nil
}

// flakyTx implements the methods of pgx.Tx that the example uses; the
// embedded interface stands for the others.
type flakyTx struct {
	pgx.Tx
	db *flakyDB
}

func (t *flakyTx) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.NewCommandTag("UPDATE 1"), nil
}

func (t *flakyTx) Commit(context.Context) error {
	if t.db.commits++; t.db.commits == 1 {
		return &pgconn.PgError{Code: "40001", Message: "could not serialize access due to concurrent update"}
	}
	return nil
}

func (t *flakyTx) Rollback(context.Context) error { return nil }
