package txretry

import (
	"context"

	"github.com/txretry/txretry/txretry/internal/inject"
)

// injectedConflict is the serialization failure that package txretrytest
// injects into attempt n of a call made with ctx after its fn returned
// nil, or nil. Outside tests it costs one atomic load.
func injectedConflict(ctx context.Context, n int) error {
	if inject.On() && n <= inject.For(ctx).Conflicts {
		return &inject.ConflictError{}
	}
	return nil
}

// commit commits tx. When package txretrytest injects a lost COMMIT, the
// call's first COMMIT commits or rolls back tx as asked and reports the
// connection closed instead.
func (c *call) commit(ctx context.Context, tx Tx) error {
	if inject.On() && !c.commitLost {
		if f := inject.For(ctx); f.LoseCommit {
			c.commitLost = true
			end := tx.Rollback
			if f.Committed {
				end = tx.Commit
			}
			if err := end(ctx, c.cfg.commitTimeout); err != nil {
				return err
			}
			return inject.NewLostCommit()
		}
	}
	return tx.Commit(ctx, c.cfg.commitTimeout)
}
