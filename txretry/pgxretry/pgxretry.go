package pgxretry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/internal/dblock"
)

// Beginner begins pgx transactions: *pgxpool.Pool and *pgx.Conn satisfy it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// RunInTx runs fn in a transaction on db and commits it, re-running the
// whole transaction when PostgreSQL reports a serialization failure or a
// deadlock, with the same semantics and options as txretry.RunInTx.
//
// The pgx.Tx that fn receives records the server error that aborted the
// transaction: the last error its statements got, other than 25P02
// (in_failed_sql_transaction), unless a later statement succeeded, as a
// ROLLBACK TO SAVEPOINT does (an error fn handled through a savepoint is
// forgotten). If fn swallows such an error and returns nil, the server
// answers COMMIT with ROLLBACK (pgx.ErrTxCommitRollback); RunInTx then
// returns an error that matches both, and retries when the swallowed error
// was retryable. Statements that fn runs through tx.Conn() bypass the
// record: a COMMIT turned into ROLLBACK after them is returned as
// pgx.ErrTxCommitRollback alone, and not retried. Calls of Commit or Rollback on that pgx.Tx by fn return
// txretry.ErrTxEndedByFn and do nothing: RunInTx ends the transaction.
//
// What ctx governs: BEGIN, fn's statements (when fn passes the context it
// received), the waits between attempts and verification; not COMMIT, which
// runs under txretry.WithCommitTimeout once fn has returned nil.
func RunInTx(ctx context.Context, db Beginner, fn func(ctx context.Context, tx pgx.Tx) error, opts ...txretry.Option) error {
	if fn == nil {
		return fmt.Errorf("%w: nil fn", txretry.ErrInvalidOption)
	}
	return txretry.Run(ctx, adapter{db: db, fn: fn}, append([]txretry.Option{defaultLockTimeout}, opts...)...)
}

// defaultLockTimeout is RunInTx's default, which the caller's options
// override: pgx sends the statement with BEGIN, so it costs nothing.
var defaultLockTimeout = txretry.WithLockTimeout(txretry.DefaultLockTimeout)

// adapter runs pgx transactions in txretry's engine.
type adapter struct {
	db Beginner
	fn func(ctx context.Context, tx pgx.Tx) error
}

var (
	_ txretry.AdapterHandle            = adapter{}
	_ txretry.AdapterContentionManager = adapter{}
	_ txretry.AdapterSingleConn        = adapter{}
	_ txretry.AdapterCheckTxOptions    = adapter{}
	_ txretry.AdapterFunc              = adapter{}
	_ txretry.AdapterLease             = adapter{}
	_ txretry.TxQueryString            = (*attempt)(nil)
)

func (a adapter) Begin(ctx context.Context, o txretry.TxOptions) (*attempt, error) {
	opts, err := txOptions(o)
	if err != nil {
		return nil, err
	}
	tx, err := a.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	at := &attempt{tx: tx}
	at.fnTx = &recTx{Tx: tx, rec: &at.rec, outer: true}
	return at, nil
}

func (a adapter) Call(ctx context.Context, at *attempt) error {
	return a.fn(ctx, at.fnTx)
}

// Handle is db, which may be nil: Run then returns ErrInvalidOption.
func (a adapter) Handle() any { return a.db }

// Func is the caller's fn itself (Call hands it a recording pgx.Tx).
func (a adapter) Func() any { return a.fn }

func (a adapter) ContentionManager() *txretry.ContentionManager {
	switch a.db.(type) {
	case *pgxpool.Pool, *pgx.Conn:
		return txretry.ManagerFor(a.db)
	}
	return nil
}

func (a adapter) CheckTxOptions(o txretry.TxOptions) error {
	_, err := txOptions(o)
	return err
}

func (a adapter) SingleConn() bool {
	_, ok := a.db.(*pgx.Conn)
	return ok
}

func txOptions(o txretry.TxOptions) (pgx.TxOptions, error) {
	var opts pgx.TxOptions
	switch o.Isolation {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		opts.IsoLevel = pgx.ReadUncommitted
	case sql.LevelReadCommitted:
		opts.IsoLevel = pgx.ReadCommitted
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		opts.IsoLevel = pgx.RepeatableRead
	case sql.LevelSerializable:
		opts.IsoLevel = pgx.Serializable
	default:
		return opts, fmt.Errorf("%w: isolation level %v is not supported by pgx", txretry.ErrInvalidOption, o.Isolation)
	}
	if o.ReadOnly {
		opts.AccessMode = pgx.ReadOnly
	}
	if o.LockTimeout > 0 {
		// One simple-protocol message, so no extra round trip: pgx runs
		// BEGIN's query without arguments that way.
		opts.BeginQuery = beginSQL(opts) + "; " + dblock.SetLockTimeout(o.LockTimeout)
	}
	return opts, nil
}

// beginSQL is the BEGIN statement of opts, as pgx writes it when
// BeginQuery is empty.
func beginSQL(opts pgx.TxOptions) string {
	s := "begin"
	if opts.IsoLevel != "" {
		s += " isolation level " + string(opts.IsoLevel)
	}
	if opts.AccessMode != "" {
		s += " " + string(opts.AccessMode)
	}
	return s
}

// attempt is one pgx attempt.
type attempt struct {
	tx   pgx.Tx
	rec  recorder
	fnTx *recTx // over tx: what fn, nested calls and TxOrDB get
}

// shielded is ctx without its cancellation, bounded by timeout.
func shielded(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}

func (a *attempt) Commit(ctx context.Context, timeout time.Duration) error {
	cctx, cancel := shielded(ctx, timeout)
	defer cancel()
	err := a.tx.Commit(cctx)
	if errors.Is(err, pgx.ErrTxCommitRollback) {
		// The server answered COMMIT with ROLLBACK: nothing was committed.
		if swallowed := a.rec.get(); swallowed != nil {
			err = errors.Join(err, swallowed)
		}
		return txretry.NotCommitted(err)
	}
	return err
}

func (a *attempt) Rollback(ctx context.Context, timeout time.Duration) error {
	rctx, cancel := shielded(ctx, timeout)
	defer cancel()
	return a.tx.Rollback(rctx)
}

func (a *attempt) Exec(ctx context.Context, query string) error {
	_, err := a.tx.Exec(ctx, query)
	return err
}

func (a *attempt) QueryString(ctx context.Context, query string) (string, bool, error) {
	var s *string
	if err := a.tx.QueryRow(ctx, query).Scan(&s); err != nil {
		return "", false, err
	}
	if s == nil {
		return "", false, nil
	}
	return *s, true, nil
}

// recorder keeps the server error that left the attempt's transaction
// aborted, as far as fn's statements show it.
//
// PostgreSQL aborts a transaction at its first failed statement; from then
// on every statement fails with 25P02 (in_failed_sql_transaction) except
// ROLLBACK TO SAVEPOINT, which recovers it. So: a server error other than
// 25P02 is recorded; 25P02 leaves the record as it is; a statement that
// succeeds clears it, because it shows the transaction is not aborted (an
// error that fn handled through a savepoint no longer decides the COMMIT).
type recorder struct {
	mu  sync.Mutex
	err error
}

// note records what err says about the transaction and returns err.
func (r *recorder) note(err error) error {
	code := pgerr.SQLState(err)
	switch {
	case code == "25P02":
		return err
	case code == "" && err != nil && !errors.Is(err, pgx.ErrNoRows):
		return err // a client-side error says nothing about the transaction
	}
	r.mu.Lock()
	if code != "" {
		r.err = err
	} else {
		r.err = nil // the statement succeeded (or found no rows)
	}
	r.mu.Unlock()
	return err
}

func (r *recorder) get() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// recTx is the pgx.Tx handed to fn: it records server errors and keeps fn
// from ending the real transaction.
type recTx struct {
	pgx.Tx
	rec   *recorder
	outer bool
}

func (t *recTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.Tx.Begin(ctx)
	if t.rec.note(err) != nil {
		return nil, err
	}
	return &recTx{Tx: tx, rec: t.rec}, nil
}

func (t *recTx) Commit(ctx context.Context) error {
	if t.outer {
		return txretry.ErrTxEndedByFn
	}
	return t.rec.note(t.Tx.Commit(ctx))
}

func (t *recTx) Rollback(ctx context.Context) error {
	if t.outer {
		return txretry.ErrTxEndedByFn
	}
	return t.rec.note(t.Tx.Rollback(ctx)) // ROLLBACK TO SAVEPOINT recovers the transaction
}

func (t *recTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := t.Tx.Exec(ctx, sql, args...)
	return tag, t.rec.note(err)
}

func (t *recTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := t.Tx.Query(ctx, sql, args...)
	if err != nil {
		return rows, t.rec.note(err)
	}
	return &recRows{Rows: rows, rec: t.rec}, nil
}

func (t *recTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return recRow{row: t.Tx.QueryRow(ctx, sql, args...), rec: t.rec}
}

func (t *recTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return &recBatch{BatchResults: t.Tx.SendBatch(ctx, b), rec: t.rec}
}

func (t *recTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	n, err := t.Tx.CopyFrom(ctx, table, cols, src)
	return n, t.rec.note(err)
}

func (t *recTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	sd, err := t.Tx.Prepare(ctx, name, sql)
	return sd, t.rec.note(err)
}

type recRows struct {
	pgx.Rows
	rec *recorder
}

func (r *recRows) Err() error { return r.rec.note(r.Rows.Err()) }

type recRow struct {
	row pgx.Row
	rec *recorder
}

func (r recRow) Scan(dest ...any) error { return r.rec.note(r.row.Scan(dest...)) }

type recBatch struct {
	pgx.BatchResults
	rec *recorder
}

func (b *recBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	return tag, b.rec.note(err)
}

func (b *recBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	if err != nil {
		return rows, b.rec.note(err)
	}
	return &recRows{Rows: rows, rec: b.rec}, nil
}

func (b *recBatch) QueryRow() pgx.Row { return recRow{row: b.BatchResults.QueryRow(), rec: b.rec} }

func (b *recBatch) Close() error { return b.rec.note(b.BatchResults.Close()) }
