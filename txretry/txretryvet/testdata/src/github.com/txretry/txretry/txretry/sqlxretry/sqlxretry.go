package sqlxretry

import (
	"context"

	"github.com/jmoiron/sqlx"
	"github.com/txretry/txretry/txretry"
)

func RunInTx(ctx context.Context, db *sqlx.DB, fn func(ctx context.Context, tx *sqlx.Tx) error, opts ...txretry.Option) error {
	return nil
}
