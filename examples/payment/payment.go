package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
)

var (
	// errAlreadyPaid is returned by fn when the key is taken: the payment
	// was made earlier. It is not retried; Pay turns it into the earlier
	// receipt.
	errAlreadyPaid = errors.New("payment already made under this key")

	// ErrInsufficientFunds declines a payment.
	ErrInsufficientFunds = errors.New("insufficient funds")

	// ErrKeyReused is returned when a key that paid one amount from one
	// account is presented with another account or amount: a client bug
	// that must not be answered with the earlier receipt.
	ErrKeyReused = errors.New("idempotency key reused for a different payment")

	// ErrNoSuchPayment is returned by Lookup for a key without a payment.
	ErrNoSuchPayment = errors.New("no payment under this key")
)

// Receipt is the result of a payment, the same for every call with its key.
type Receipt struct {
	Key          string
	Account      int
	Amount       int64
	BalanceAfter int64
}

// NewKey returns a fresh idempotency key: 26 random base32 characters
// (130 bits). The client makes it once per payment, before the first call,
// and sends it with every retry of that payment.
func NewKey() string {
	return rand.Text()
}

// Verify chooses how an uncertain commit is verified.
type Verify string

// The verification modes.
const (
	// VerifyKey probes the idempotency key (txretry.WithVerify).
	VerifyKey Verify = "key"
	// VerifyBuiltin uses txretry's verifiers: WithXactStatusVerification
	// on PostgreSQL, WithCommitMarker on MySQL.
	VerifyBuiltin Verify = "builtin"
)

// Payments makes idempotent payments in one namespace.
type Payments struct {
	db     *sql.DB
	engine dbserver.Engine
	q      queries
	verify Verify
	// observer, if set, observes every call.
	observer txretry.Observer
}

// queries is the SQL, rebound for the engine.
type queries struct {
	accounts, payments, markers string
	insert, debit, balance      string
	complete, lookup            string
}

// newQueries returns the SQL for engine e in namespace ns.
func newQueries(e dbserver.Engine, ns dbserver.Namespace) queries {
	q := queries{
		accounts: ns.Table("payment_accounts"),
		payments: ns.Table("payment_payments"),
		markers:  ns.Table("payment_commit_markers"),
	}
	r := e.Rebind
	q.insert = r("INSERT INTO " + q.payments + " (idempotency_key, account_id, amount) VALUES (?, ?, ?)")
	q.debit = r("UPDATE " + q.accounts + " SET balance = balance - ? WHERE id = ? AND balance >= ?")
	q.balance = r("SELECT balance FROM " + q.accounts + " WHERE id = ?")
	q.complete = r("UPDATE " + q.payments + " SET balance_after = ? WHERE idempotency_key = ?")
	q.lookup = r("SELECT account_id, amount, balance_after FROM " + q.payments + " WHERE idempotency_key = ?")
	return q
}

// NewPayments returns payments over db, whose tables live in ns.
func NewPayments(db *sql.DB, ns dbserver.Namespace, verify Verify) *Payments {
	return &Payments{db: db, engine: ns.Engine, q: newQueries(ns.Engine, ns), verify: verify}
}

// Setup drops and creates the tables and opens account 1 with balance.
func (p *Payments) Setup(ctx context.Context, balance int64) error {
	marker, err := txretry.CommitMarkerDDL(p.q.markers)
	if err != nil {
		return err
	}
	stmts := []string{
		"DROP TABLE IF EXISTS " + p.q.payments,
		"DROP TABLE IF EXISTS " + p.q.accounts,
		"DROP TABLE IF EXISTS " + p.q.markers,
		"CREATE TABLE " + p.q.accounts + " (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
		"CREATE TABLE " + p.q.payments + ` (
			idempotency_key VARCHAR(64) PRIMARY KEY,
			account_id INT NOT NULL,
			amount BIGINT NOT NULL,
			balance_after BIGINT)`,
		marker, // used by -verify builtin on MySQL
	}
	for _, s := range stmts {
		if _, err := p.db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("set up tables: %w", err)
		}
	}
	_, err = p.db.ExecContext(ctx, p.engine.Rebind("INSERT INTO "+p.q.accounts+" (id, balance) VALUES (1, ?)"), balance)
	return err
}

// Balance returns an account's balance.
func (p *Payments) Balance(ctx context.Context, account int) (int64, error) {
	var b int64
	err := p.db.QueryRowContext(ctx, p.q.balance, account).Scan(&b)
	return b, err
}

// Pay debits amount from account once per key, and returns the receipt and
// whether this call made the payment (false: an earlier call with the same
// key did, and its receipt is returned). The key must come from the client
// and stay the same across its retries; see NewKey.
func (p *Payments) Pay(ctx context.Context, key string, account int, amount int64) (Receipt, bool, error) {
	var r Receipt
	err := txretry.RunInTx(ctx, p.db, func(ctx context.Context, tx *sql.Tx) error {
		// The key first: a duplicate ends the attempt before the account
		// is touched. Concurrent calls with one key wait here for the
		// first one to end.
		if _, err := tx.ExecContext(ctx, p.q.insert, key, account, amount); err != nil {
			if isDuplicate(err) {
				return fmt.Errorf("%w: %w", errAlreadyPaid, err)
			}
			return err
		}
		res, err := tx.ExecContext(ctx, p.q.debit, amount, account, amount)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return errors.Join(ErrInsufficientFunds, err)
		}
		r = Receipt{Key: key, Account: account, Amount: amount}
		if err := tx.QueryRowContext(ctx, p.q.balance, account).Scan(&r.BalanceAfter); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, p.q.complete, r.BalanceAfter, key)
		return err
	}, p.options(key, account, amount)...)

	if errors.Is(err, errAlreadyPaid) {
		earlier, err := p.Lookup(ctx, key)
		if err != nil {
			return Receipt{}, false, err
		}
		if earlier.Account != account || earlier.Amount != amount {
			return Receipt{}, false, ErrKeyReused
		}
		return earlier, false, nil
	}
	if err != nil {
		return Receipt{}, false, err
	}
	return r, true, nil
}

// options returns the txretry options of a payment.
func (p *Payments) options(key string, account int, amount int64) []txretry.Option {
	opts := []txretry.Option{txretry.WithLabel("payment")}
	if p.observer != nil {
		opts = append(opts, txretry.WithObserver(p.observer))
	}
	switch {
	case p.verify == VerifyKey:
		opts = append(opts, txretry.WithVerify(p.Verifier(key, account, amount)))
	case p.engine == dbserver.Postgres:
		opts = append(opts, txretry.WithXactStatusVerification())
	default:
		opts = append(opts, txretry.WithCommitMarker(p.q.markers))
	}
	return opts
}

// VerifierName describes the verifier Pay configures.
func (p *Payments) VerifierName() string {
	switch {
	case p.verify == VerifyKey:
		return "txretry.WithVerify: probe of the idempotency key"
	case p.engine == dbserver.Postgres:
		return "txretry.WithXactStatusVerification (pg_xact_status of the transaction id)"
	default:
		return "txretry.WithCommitMarker(" + p.q.markers + ")"
	}
}

// Verifier returns the callback that tells whether the payment under key
// committed, for txretry.WithVerify. It runs after an uncertain commit, on a
// fresh connection from the pool (the attempt's connection is broken).
//
// It inserts the key, with the payment's account and amount, in a
// transaction it always rolls back:
//   - a duplicate key: the lost transaction committed → committed=true;
//   - the insert succeeds: no committed payment has the key, and none can
//     commit any more → committed=false, and txretry runs the payment again;
//   - any other error: unknown; txretry calls the callback again after a
//     backoff, until its verification timeout, then reports
//     ErrCommitUncertain.
//
// Why not SELECT the key? While the lost transaction has not ended (the
// server has not yet noticed the broken connection), its row is uncommitted.
// A plain read does not see it, and on PostgreSQL neither does SELECT ... FOR
// SHARE: the read would answer "not committed" for a transaction that may
// still commit (its COMMIT may be in flight), and the retry would pay twice.
// An INSERT of the same key, on the other hand, waits for the row's
// transaction to end and then fails (it committed) or succeeds (it rolled
// back), so the probe never answers early.
func (p *Payments) Verifier(key string, account int, amount int64) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (committed bool, err error) {
		tx, err := p.db.BeginTx(ctx, nil)
		if err != nil {
			return false, err
		}
		defer func() {
			// The probe is always undone.
			if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
				err = errors.Join(err, rbErr)
			}
		}()
		_, err = tx.ExecContext(ctx, p.q.insert, key, account, amount)
		switch {
		case err == nil:
			return false, nil
		case isDuplicate(err):
			return true, nil
		default:
			return false, err
		}
	}
}

// Lookup returns the receipt of the payment under key, or ErrNoSuchPayment.
func (p *Payments) Lookup(ctx context.Context, key string) (Receipt, error) {
	r := Receipt{Key: key}
	var after sql.NullInt64
	err := p.db.QueryRowContext(ctx, p.q.lookup, key).Scan(&r.Account, &r.Amount, &after)
	if errors.Is(err, sql.ErrNoRows) {
		return Receipt{}, ErrNoSuchPayment
	}
	r.BalanceAfter = after.Int64
	return r, err
}

// isDuplicate reports a unique violation: SQLSTATE 23505 or MySQL error 1062.
func isDuplicate(err error) bool {
	return pgerr.IsUniqueViolation(err) || mysqlerr.Has(err, mysqlerr.DupEntry)
}
