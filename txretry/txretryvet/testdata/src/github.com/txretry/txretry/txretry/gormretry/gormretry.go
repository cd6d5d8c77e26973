package gormretry

import (
	"context"

	"github.com/txretry/txretry/txretry"
	"gorm.io/gorm"
)

func RunInTx(ctx context.Context, db *gorm.DB, fn func(ctx context.Context, tx *gorm.DB) error, opts ...txretry.Option) error {
	return nil
}
