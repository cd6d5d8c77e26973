package txretry

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// The database/sql adapter recognises pgx's rollback-at-commit by its text
// (it does not import pgx): the text must be pgx's. The integration module
// checks it against a real server through pgx's stdlib driver.
func TestPgxCommitRollbackMsgIsPgxs(t *testing.T) {
	if got := pgx.ErrTxCommitRollback.Error(); got != pgxCommitRollbackMsg {
		t.Fatalf("pgx.ErrTxCommitRollback reads %q, the adapter matches %q", got, pgxCommitRollbackMsg)
	}
}
