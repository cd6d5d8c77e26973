package pgxretry

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/txretry/txretry/txretry"
)

func RunInTx(ctx context.Context, db any, fn func(ctx context.Context, tx pgx.Tx) error, opts ...txretry.Option) error {
	return nil
}
