package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/integration/dbserver/dbservertest"
	"github.com/txretry/txretry/txretry"
)

// This file simulates a lost COMMIT without a proxy, by wrapping the driver:
// the next COMMIT really commits (or rolls back) and then reports a broken
// connection, as a client sees it when the connection dies while COMMIT is
// on its way. The integration tests do the same for real, through a proxy
// that cuts the connection.

// lost says what the next COMMIT does.
type lost int32

const (
	// lostNone: COMMIT works normally.
	lostNone lost = iota
	// lostAfterCommit: the transaction commits, then the client sees an
	// error.
	lostAfterCommit
	// lostBeforeCommit: the transaction is rolled back (COMMIT never
	// arrived), then the client sees an error.
	lostBeforeCommit
)

// errConnLost is what the client sees: an unexpected EOF, which says nothing
// about the outcome.
var errConnLost = fmt.Errorf("read from server: %w", io.ErrUnexpectedEOF)

// lossyConnector wraps a connector; its next COMMIT does what next says.
type lossyConnector struct {
	base driver.Connector
	next atomic.Int32
}

func (c *lossyConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &lossyConn{conn: conn, c: c}, nil
}

func (c *lossyConnector) Driver() driver.Driver { return c.base.Driver() }

// lossyConn forwards to the driver's connection and wraps its transactions.
type lossyConn struct {
	conn driver.Conn
	c    *lossyConnector
}

func (l *lossyConn) Prepare(query string) (driver.Stmt, error) { return l.conn.Prepare(query) }
func (l *lossyConn) Close() error                              { return l.conn.Close() }

// Begin is required by driver.Conn; database/sql uses BeginTx.
func (l *lossyConn) Begin() (driver.Tx, error) {
	return nil, errors.New("lossyConn: use BeginTx")
}

func (l *lossyConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := l.conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &lossyTx{tx: tx, c: l.c}, nil
}

func (l *lossyConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return l.conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (l *lossyConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return l.conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (l *lossyConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return l.conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

// lossyTx loses its COMMIT when told to.
type lossyTx struct {
	tx driver.Tx
	c  *lossyConnector
}

func (t *lossyTx) Commit() error {
	switch lost(t.c.next.Swap(int32(lostNone))) {
	case lostAfterCommit:
		if err := t.tx.Commit(); err != nil {
			return err
		}
		return errConnLost
	case lostBeforeCommit:
		if err := t.tx.Rollback(); err != nil {
			return err
		}
		return errConnLost
	default:
		return t.tx.Commit()
	}
}

func (t *lossyTx) Rollback() error { return t.tx.Rollback() }

// lossyDB opens the namespace through a lossy connector.
func lossyDB(t *testing.T, ns dbserver.Namespace) (*sql.DB, *lossyConnector) {
	t.Helper()
	var base driver.Connector
	switch ns.Engine {
	case dbserver.Postgres:
		cfg, err := pgx.ParseConfig(ns.DSN)
		if err != nil {
			t.Fatal(err)
		}
		base = stdlib.GetConnector(*cfg)
	default:
		cfg, err := mysql.ParseDSN(ns.DSN)
		if err != nil {
			t.Fatal(err)
		}
		if base, err = mysql.NewConnector(cfg); err != nil {
			t.Fatal(err)
		}
	}
	c := &lossyConnector{base: base}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db, c
}

// verifications records the CommitVerified events of calls, and counts
// their attempts.
type verifications struct {
	mu       sync.Mutex
	events   []txretry.Event
	attempts int
}

func (v *verifications) Observe(_ context.Context, e txretry.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch e.Kind {
	case txretry.CommitVerified:
		v.events = append(v.events, e)
	case txretry.AttemptStarted:
		v.attempts++
	}
}

// TestLostCommit makes the COMMIT of a payment report a lost connection,
// after the server committed or before it could, and asserts that the
// idempotency key resolves it with the payment made exactly once: a COMMIT
// that never arrived is retried; one the server applied is found by the
// key's probe to be this call's commit, and Pay returns the new receipt.
func TestLostCommit(t *testing.T) {
	cases := []struct {
		name     string
		lost     lost
		want     txretry.Verification
		attempts int
		made     bool
	}{
		{"committed", lostAfterCommit, txretry.VerifiedCommitted, 1, true},
		{"not committed", lostBeforeCommit, txretry.VerifiedNotCommitted, 2, true},
	}
	for _, e := range engines {
		t.Run(e.String(), func(t *testing.T) {
			srv := dbservertest.Server(t, e)
			ns := dbservertest.Namespace(t, srv, "txretry_test_payment_lost")
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					db, conn := lossyDB(t, ns)
					p := newPayments(t, db, ns)
					obs := &verifications{}
					p.observer = obs
					ctx := context.Background()

					conn.next.Store(int32(tc.lost))
					key := NewKey()
					r, made, err := p.Pay(ctx, key, 1, 100)
					if err != nil || made != tc.made || r.BalanceAfter != 900 {
						t.Fatalf("Pay = %+v, %v, %v; want new=%v leaving 900", r, made, err, tc.made)
					}
					if len(obs.events) != 1 || obs.events[0].Verification != tc.want || obs.events[0].Verifier != "idempotency-key" || obs.attempts != tc.attempts {
						t.Errorf("verifications = %+v after %d attempts, want one %v by the key after %d",
							obs.events, obs.attempts, tc.want, tc.attempts)
					}
					// Exactly once: the balance, and the receipt a retry returns.
					if b, err := p.Balance(ctx, 1); err != nil || b != 900 {
						t.Errorf("balance = %d, %v; want 900", b, err)
					}
					again, made, err := p.Pay(ctx, key, 1, 100)
					if err != nil || made || again != r {
						t.Errorf("retry of the client = %+v, %v, %v; want the receipt %+v", again, made, err, r)
					}
				})
			}
		})
	}
}
