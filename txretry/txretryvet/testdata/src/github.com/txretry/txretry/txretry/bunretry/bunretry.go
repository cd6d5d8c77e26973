package bunretry

import (
	"context"

	"github.com/txretry/txretry/txretry"
	"github.com/uptrace/bun"
)

func RunInTx(ctx context.Context, db *bun.DB, fn func(ctx context.Context, tx bun.Tx) error, opts ...txretry.Option) error {
	return nil
}
