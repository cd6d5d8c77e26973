// Errors of statements discarded; rows loops without rows.Err.
package errs

import (
	"context"
	"database/sql"

	"example.com/store"
	"github.com/jackc/pgx/v5"
	"github.com/jmoiron/sqlx"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/gormretry"
	"github.com/txretry/txretry/txretry/pgxretry"
	"github.com/txretry/txretry/txretry/sqlxretry"
	"gorm.io/gorm"
)

// True cases.

func blankBoth(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, _ = tx.ExecContext(ctx, "UPDATE t SET v = 1") // want `error of tx.ExecContext\(...\) discarded`
		return nil
	})
}

func bareCall(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		tx.ExecContext(ctx, "UPDATE t SET v = 1") // want `error of tx.ExecContext\(...\) discarded`
		return nil
	})
}

func bareScan(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		var n int
		tx.QueryRowContext(ctx, "SELECT 1").Scan(&n) // want `error of tx.QueryRowContext\(ctx, "SELECT 1"\).Scan\(...\) discarded`
		return nil
	})
}

func blankRepository(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_ = store.New(tx).DeleteOrders(ctx) // want `error of store.New\(tx\).DeleteOrders\(...\) discarded`
		return nil
	})
}

func neverRead(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE t SET v = 1")
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE t SET v = 2") // want `error of tx.ExecContext\(...\) assigned to err and never read`
		return nil
	})
}

func overwritten(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE t SET v = 1") // want `assigned to err and never read`
		_, err = tx.ExecContext(ctx, "UPDATE t SET v = 2")
		return err
	})
}

func pgxBlank(ctx context.Context, db any) error {
	return pgxretry.RunInTx(ctx, db, func(ctx context.Context, tx pgx.Tx) error {
		_, _ = tx.Exec(ctx, "UPDATE t SET v = 1") // want `error of tx.Exec\(...\) discarded`
		return nil
	})
}

func sqlxBare(ctx context.Context, db *sqlx.DB) error {
	return sqlxretry.RunInTx(ctx, db, func(ctx context.Context, tx *sqlx.Tx) error {
		var n int
		tx.GetContext(ctx, &n, "SELECT 1") // want `error of tx.GetContext\(...\) discarded`
		return nil
	})
}

func gormBare(ctx context.Context, db *gorm.DB) error {
	return gormretry.RunInTx(ctx, db, func(ctx context.Context, tx *gorm.DB) error {
		tx.Create(&struct{}{}) // want `error of tx.Create\(...\) discarded \(its .Error is not read\)`
		return nil
	})
}

func rowsWithoutErr(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "SELECT v FROM t")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() { // want `rows.Next loop without rows.Err\(\)`
			var v int
			if err := rows.Scan(&v); err != nil {
				return err
			}
		}
		return nil
	})
}

func pgxRowsWithoutErr(ctx context.Context, db any) error {
	return pgxretry.RunInTx(ctx, db, func(ctx context.Context, tx pgx.Tx) error {
		rs, err := tx.Query(ctx, "SELECT v FROM t")
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() { // want `rs.Next loop without rs.Err\(\)`
		}
		return nil
	})
}

// False cases.

func returned(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE t SET v = 1")
		return err
	})
}

func checkedInIf(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE t SET v = 1"); err != nil {
			return err
		}
		return nil
	})
}

func assignedInBranches(ctx context.Context, db *sql.DB, b bool) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if b {
			_, err = tx.ExecContext(ctx, "UPDATE t SET v = 1")
		} else {
			_, err = tx.ExecContext(ctx, "UPDATE t SET v = 2")
		}
		return err
	})
}

func readInALoop(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		for i := 0; i < 3 && err == nil; i++ {
			_, err = tx.ExecContext(ctx, "UPDATE t SET v = v + 1")
		}
		return err
	})
}

func rowsWithErr(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "SELECT v FROM t")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
		}
		return rows.Err()
	})
}

func rowsHandedOn(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "SELECT v FROM t")
		if err != nil {
			return err
		}
		for rows.Next() {
		}
		return finish(rows)
	})
}

func finish(rows *sql.Rows) error { return rows.Err() }

func closeIgnored(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, "SELECT v FROM t")
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	})
}

func gormChecked(ctx context.Context, db *gorm.DB) error {
	return gormretry.RunInTx(ctx, db, func(ctx context.Context, tx *gorm.DB) error {
		return tx.Create(&struct{}{}).Error
	})
}

func blankOutsideFn(ctx context.Context, db *sql.DB) {
	_, _ = db.ExecContext(ctx, "VACUUM")
}

func nonStatementBlank(ctx context.Context, db *sql.DB) error {
	return txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_ = txretry.Attempt(ctx)
		return nil
	})
}

func errFromOutsideVar(ctx context.Context, db *sql.DB) error {
	var err error
	runErr := txretry.RunInTx(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
		_, err = tx.ExecContext(ctx, "UPDATE t SET v = 1")
		return nil
	})
	if err != nil {
		return err
	}
	return runErr
}
