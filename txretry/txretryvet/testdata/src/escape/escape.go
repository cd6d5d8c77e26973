// The transaction escaping fn.
package escape

import (
	"context"
	"database/sql"

	"example.com/store"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/gormretry"
	"gorm.io/gorm"
)

type service struct {
	db *sql.DB
	tx *sql.Tx
	q  *store.Queries
}

var lastTx *sql.Tx

// True cases.

func toAVariable(ctx context.Context, db *sql.DB) (*sql.Tx, error) {
	var kept *sql.Tx
	err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		kept = tx // want `the transaction escapes fn into kept`
		return nil
	})
	return kept, err
}

func (s *service) toAField(ctx context.Context) error {
	return txretry.RunInTx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
		s.tx = tx // want `the transaction escapes fn into s.tx`
		return nil
	})
}

func toAGlobal(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		lastTx = tx // want `the transaction escapes fn into lastTx`
		return nil
	})
}

func toAChannel(ctx context.Context, db *sql.DB, txs chan<- *sql.Tx) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		txs <- tx // want `the transaction escapes fn through a channel`
		return nil
	})
}

func (s *service) repositoryToAField(ctx context.Context) error {
	return txretry.RunInTx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
		s.q = store.New(tx) // want `the transaction escapes fn into s.q`
		return nil
	})
}

func appended(ctx context.Context, db *sql.DB, all []*sql.Tx) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		all = append(all, tx) // want `the transaction escapes fn into all`
		return nil
	})
}

func closureReturningTheTx(ctx context.Context, db *sql.DB) (func() *sql.Tx, error) {
	var get func() *sql.Tx
	err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		get = func() *sql.Tx { return tx } // want `the transaction escapes fn into get`
		return nil
	})
	return get, err
}

func inAStruct(ctx context.Context, db *sql.DB, m map[string]service) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		m["last"] = service{tx: tx} // want `the transaction escapes fn into m\["last"\]`
		return nil
	})
}

func gormSession(ctx context.Context, db *gorm.DB) (*gorm.DB, error) {
	var kept *gorm.DB
	err := gormretry.RunInTx(ctx, db, func(ctx context.Context, tx *gorm.DB) error {
		kept = tx.WithContext(ctx) // want `the transaction escapes fn into kept`
		return nil
	})
	return kept, err
}

// False cases.

func resultToAVariable(ctx context.Context, db *sql.DB) (int64, error) {
	var id int64
	err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		id, err = store.New(tx).CreateOrder(ctx, "c")
		return err
	})
	return id, err
}

func scannedIntoOuter(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, "SELECT 1").Scan(&n)
	})
	return n, err
}

func localCopy(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		t := tx
		q := store.New(t)
		return q.DeleteOrders(ctx)
	})
}

func localClosure(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		exec := func(query string) error {
			_, err := tx.ExecContext(ctx, query)
			return err
		}
		return exec("UPDATE t SET v = 1")
	})
}

func outerBoolFromTx(ctx context.Context, db *sql.DB) (bool, error) {
	var found bool
	err := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		found = tx != nil
		return nil
	})
	return found, err
}

func passedToAHelper(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		return helper(ctx, tx)
	})
}

func helper(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, "UPDATE t SET v = 1")
	return err
}

func storedOutsideFn(s *service, tx *sql.Tx) {
	s.tx = tx
}
