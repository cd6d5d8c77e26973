package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/txretry"
)

var (
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

// Payments makes idempotent payments in one namespace.
type Payments struct {
	db     *sql.DB
	engine dbserver.Engine
	q      queries
	// observer, if set, observes every call.
	observer txretry.Observer
}

// queries is the SQL, rebound for the engine.
type queries struct {
	accounts, payments, keys string
	debit, balance, receipt  string
	lookup                   string
}

// newQueries returns the SQL for engine e in namespace ns.
func newQueries(e dbserver.Engine, ns dbserver.Namespace) queries {
	q := queries{
		accounts: ns.Table("payment_accounts"),
		payments: ns.Table("payment_payments"),
		keys:     ns.Table("payment_idempotency_keys"),
	}
	r := e.Rebind
	q.debit = r("UPDATE " + q.accounts + " SET balance = balance - ? WHERE id = ? AND balance >= ?")
	q.balance = r("SELECT balance FROM " + q.accounts + " WHERE id = ?")
	q.receipt = r("INSERT INTO " + q.payments + " (idempotency_key, account_id, amount, balance_after) VALUES (?, ?, ?, ?)")
	q.lookup = r("SELECT account_id, amount, balance_after FROM " + q.payments + " WHERE idempotency_key = ?")
	return q
}

// NewPayments returns payments over db, whose tables live in ns.
func NewPayments(db *sql.DB, ns dbserver.Namespace) *Payments {
	return &Payments{db: db, engine: ns.Engine, q: newQueries(ns.Engine, ns)}
}

// Setup drops and creates the tables and opens account 1 with balance.
func (p *Payments) Setup(ctx context.Context, balance int64) error {
	keys, err := txretry.IdempotencyKeysDDL(p.q.keys)
	if err != nil {
		return err
	}
	stmts := []string{
		"DROP TABLE IF EXISTS " + p.q.payments,
		"DROP TABLE IF EXISTS " + p.q.accounts,
		"DROP TABLE IF EXISTS " + p.q.keys,
		"CREATE TABLE " + p.q.accounts + " (id INT PRIMARY KEY, balance BIGINT NOT NULL)",
		// The receipts, stored under the key's token in fn's
		// transaction.
		"CREATE TABLE " + p.q.payments + ` (
			idempotency_key VARCHAR(64) PRIMARY KEY,
			account_id INT NOT NULL,
			amount BIGINT NOT NULL,
			balance_after BIGINT NOT NULL)`,
		keys,
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
// whether this call is known to have made the payment (false: the key was
// already committed, and the stored receipt is returned). The key must come
// from the client and stay the same across its retries; see NewKey.
//
// txretry.WithIdempotencyKey does the bookkeeping: each attempt inserts the
// key before fn runs, so a key already paid ends the call with
// txretry.ErrAlreadyCommitted without touching the account; concurrent
// calls with one key wait for the first; and a lost COMMIT is resolved by
// probing the call's marker, stored beside the key. fn stores the receipt under the same key, in the same
// transaction, which is what a repeated call returns.
func (p *Payments) Pay(ctx context.Context, key string, account int, amount int64) (Receipt, bool, error) {
	// The receipt is stored under the key's token, the form the key table
	// holds: at most 64 bytes, and never equal for two keys that differ
	// only in case, which MySQL's default collation would confuse.
	token := txretry.IdempotencyKeyToken(key)
	var r Receipt
	err := txretry.RunInTx(ctx, p.db, func(ctx context.Context, tx *sql.Tx) error {
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
		_, err = tx.ExecContext(ctx, p.q.receipt, token, account, amount, r.BalanceAfter)
		return err
	}, p.options(key)...)

	if errors.Is(err, txretry.ErrAlreadyCommitted) {
		// Paid before, by an earlier call or a concurrent one: the stored
		// receipt is the answer.
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
func (p *Payments) options(key string) []txretry.Option {
	opts := []txretry.Option{txretry.WithLabel("payment"), txretry.WithIdempotencyKey(p.q.keys, key)}
	if p.observer != nil {
		opts = append(opts, txretry.WithObserver(p.observer))
	}
	return opts
}

// Lookup returns the receipt of the payment under key, or ErrNoSuchPayment.
func (p *Payments) Lookup(ctx context.Context, key string) (Receipt, error) {
	r := Receipt{Key: key}
	err := p.db.QueryRowContext(ctx, p.q.lookup, txretry.IdempotencyKeyToken(key)).Scan(&r.Account, &r.Amount, &r.BalanceAfter)
	if errors.Is(err, sql.ErrNoRows) {
		return Receipt{}, ErrNoSuchPayment
	}
	return r, err
}
