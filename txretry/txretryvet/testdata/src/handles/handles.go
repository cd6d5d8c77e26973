// Statements on a database handle instead of fn's transaction.
package handles

import (
	"context"
	"database/sql"

	"example.com/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/bunretry"
	"github.com/txretry/txretry/txretry/gormretry"
	"github.com/txretry/txretry/txretry/pgxretry"
	"github.com/txretry/txretry/txretry/sqlxretry"
	"github.com/uptrace/bun"
	"gorm.io/gorm"
)

type service struct {
	db   *sql.DB
	pool *pgxpool.Pool
	q    *store.Queries
}

// True cases.

func onTheDB(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := db.ExecContext(ctx, "UPDATE t SET v = 1") // want `ExecContext on db runs outside the transaction`
		return err
	})
}

func (s *service) onAField(ctx context.Context) error {
	return txretry.RunInTx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
		return s.db.QueryRowContext(ctx, "SELECT 1").Scan(new(int)) // want `QueryRowContext on s.db runs outside`
	})
}

func beginOnTheDB(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		other, err := db.BeginTx(ctx, nil) // want `BeginTx on db runs outside`
		if err != nil {
			return err
		}
		return other.Commit()
	})
}

func onAConn(ctx context.Context, db *sql.DB, conn *sql.Conn) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := conn.ExecContext(ctx, "SELECT 1") // want `ExecContext on conn runs outside`
		return err
	})
}

func (s *service) onThePool(ctx context.Context) error {
	return pgxretry.RunInTx(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := s.pool.Exec(ctx, "UPDATE t SET v = 1") // want `Exec on s.pool runs outside`
		return err
	})
}

func onAPgxConn(ctx context.Context, conn *pgx.Conn) error {
	return pgxretry.RunInTx(ctx, conn, func(ctx context.Context, tx pgx.Tx) error {
		_, err := conn.Exec(ctx, "UPDATE t SET v = 1") // want `Exec on conn runs outside`
		return err
	})
}

func onSqlx(ctx context.Context, db *sqlx.DB) error {
	return sqlxretry.RunInTx(ctx, db, func(ctx context.Context, tx *sqlx.Tx) error {
		var n int
		return db.GetContext(ctx, &n, "SELECT 1") // want `GetContext on db runs outside`
	})
}

func onGorm(ctx context.Context, db *gorm.DB) error {
	return gormretry.RunInTx(ctx, db, func(ctx context.Context, tx *gorm.DB) error {
		return db.Where("id = ?", 1).First(&struct{}{}).Error // want `First on db.Where\("id = \?", 1\) runs outside`
	})
}

func onBun(ctx context.Context, db *bun.DB) error {
	return bunretry.RunInTx(ctx, db, func(ctx context.Context, tx bun.Tx) error {
		_, err := db.NewInsert().Model(&struct{}{}).Exec(ctx) // want `NewInsert on db runs outside`
		return err
	})
}

// fn by name: a function of the package, a method value, a variable.

func (s *service) transfer(ctx context.Context, tx *sql.Tx) error {
	_, err := s.db.ExecContext(ctx, "UPDATE t SET v = 1") // want `ExecContext on s.db runs outside`
	return err
}

func methodValue(ctx context.Context, s *service) error {
	return txretry.RunInTx(ctx, s.db, s.transfer)
}

var global *sql.DB

func namedFn(ctx context.Context, tx *sql.Tx) error {
	_, err := global.ExecContext(ctx, "UPDATE t SET v = 1") // want `ExecContext on global runs outside`
	return err
}

func byName(ctx context.Context) error {
	return txretry.RunInTx(ctx, global, namedFn)
}

func closureVariable(ctx context.Context, db *sql.DB) error {
	fn := func(ctx context.Context, tx *sql.Tx) error {
		_, err := db.ExecContext(ctx, "UPDATE t SET v = 1") // want `ExecContext on db runs outside`
		return err
	}
	return txretry.RunInTx(ctx, db, fn)
}

// A repository: sqlc's Queries on the pool.

func queriesOnThePool(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := store.New(db).CreateOrder(ctx, "c") // want `repository built on db in fn`
		return err
	})
}

func (s *service) queriesFromOutside(ctx context.Context) error {
	return txretry.RunInTx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.q.CreateOrder(ctx, "c") // want `s.q.CreateOrder runs on the handle s.q was built with outside fn`
		return err
	})
}

func capturedQueries(ctx context.Context, db *sql.DB) error {
	q := store.New(db)
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		return q.DeleteOrders(ctx) // want `q.DeleteOrders runs on the handle q was built with outside fn`
	})
}

type adapter struct {
	fn func(ctx context.Context, tx *sql.Tx) error
}

func (adapter) Call(ctx context.Context, tx *sql.Tx) error { return nil }

func viaRun(ctx context.Context, db *sql.DB) error {
	return txretry.Run[*sql.Tx](ctx, adapter{fn: func(ctx context.Context, tx *sql.Tx) error {
		_, err := db.ExecContext(ctx, "UPDATE t SET v = 1") // want `ExecContext on db runs outside`
		return err
	}})
}

// False cases.

func onTheTx(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE t SET v = 1")
		return err
	})
}

func txOrDB(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, _ *sql.Tx) error {
		_, err := txretry.TxOrDB(ctx, db).ExecContext(ctx, "UPDATE t SET v = 1")
		return err
	})
}

func queriesOnTheTx(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := store.New(tx).CreateOrder(ctx, "c")
		return err
	})
}

func (s *service) queriesWithTx(ctx context.Context) error {
	return txretry.RunInTx(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := s.q.WithTx(tx).CreateOrder(ctx, "c")
		return err
	})
}

func queriesOnTxOrDB(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, _ *sql.Tx) error {
		return store.New(txretry.TxOrDB(ctx, db)).DeleteOrders(ctx)
	})
}

func gormOnTheTx(ctx context.Context, db *gorm.DB) error {
	return gormretry.RunInTx(ctx, db, func(ctx context.Context, tx *gorm.DB) error {
		return tx.Where("id = ?", 1).First(&struct{}{}).Error
	})
}

func gormSessionForANestedCall(ctx context.Context, db *gorm.DB) error {
	return gormretry.RunInTx(ctx, db, func(ctx context.Context, tx *gorm.DB) error {
		return gormretry.RunInTx(ctx, db.Session(&gorm.Session{}).WithContext(ctx), func(ctx context.Context, tx *gorm.DB) error {
			return tx.Create(&struct{}{}).Error
		})
	})
}

func nestedOnTheDB(ctx context.Context, db *sqlx.DB) error {
	return sqlxretry.RunInTx(ctx, db, func(ctx context.Context, tx *sqlx.Tx) error {
		return sqlxretry.RunInTx(ctx, db.Unsafe(), func(ctx context.Context, tx *sqlx.Tx) error { return nil })
	})
}

func pgxOnTheTx(ctx context.Context, pool *pgxpool.Pool) error {
	return pgxretry.RunInTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE t SET v = 1")
		return err
	})
}

func bunOnTheTx(ctx context.Context, db *bun.DB) error {
	return bunretry.RunInTx(ctx, db, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewInsert().Model(&struct{}{}).Exec(ctx)
		return err
	})
}

func handleInTheHook(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		txretry.AfterCommit(ctx, func(ctx context.Context) {
			_, _ = db.ExecContext(ctx, "NOTIFY orders")
		})
		return nil
	})
}

func handleOutsideFn(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (v INT)"); err != nil {
		return err
	}
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error { return nil })
}

func poolStats(ctx context.Context, pool *pgxpool.Pool) error {
	return pgxretry.RunInTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		_ = pool.Stat()
		return nil
	})
}

func suppressed(ctx context.Context, db, rival *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		//txretryvet:ok a rival session, on purpose
		_, err := rival.ExecContext(ctx, "UPDATE t SET v = 2")
		return err
	})
}
