package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
	"github.com/txretry/txretry/txretry"
	"github.com/txretry/txretry/txretry/pgxretry"
)

// dialect is the SQL flavour of a driver.
type dialect uint8

const (
	dialectPG dialect = iota
	dialectMySQL
)

// phase is the step of an attempt that failed.
type phase uint8

const (
	phaseBegin phase = iota
	phaseBody
	phaseCommit
)

// rollbackTimeout bounds the ROLLBACK of a peer's failed attempt, which runs
// without the caller's deadline so that a late rollback does not cost a
// connection.
const rollbackTimeout = 5 * time.Second

// querier is what a workload's transaction body needs from a transaction.
type querier interface {
	// queryInt returns the single int64 column of the single row of q.
	queryInt(ctx context.Context, q string, args ...any) (int64, error)
	// queryInts returns the rows of q, whose ncol columns are integers,
	// flattened row by row (none: empty).
	queryInts(ctx context.Context, q string, ncol int, args ...any) ([]int64, error)
	exec(ctx context.Context, q string, args ...any) error
	// execCount runs q and returns the number of rows it affected.
	execCount(ctx context.Context, q string, args ...any) (int64, error)
}

// txBody is the body of one call's transaction.
type txBody func(ctx context.Context, q querier) error

// conn is one run's connection pool on one driver.
type conn interface {
	// exec runs q outside any transaction (DDL, seeding).
	exec(ctx context.Context, q string) error
	// queryInts returns the rows of q, whose ncol columns are integers,
	// flattened row by row.
	queryInts(ctx context.Context, q string, ncol int) ([]int64, error)
	// runTxretry runs body, a call of class cl, with txretry (RunInTx or
	// pgxretry.RunInTx), through the fn literal of its class (pgxFn, sqlFn)
	// or, with methodValue, through pgxCall's or sqlCall's method value of its class.
	runTxretry(ctx context.Context, cl callClass, methodValue bool, body txBody, opts []txretry.Option) error
	// attempt runs one SERIALIZABLE transaction: BEGIN, body, COMMIT
	// (ROLLBACK if body failed), as a peer's hand-written loop would,
	// and returns the phase that failed.
	attempt(ctx context.Context, body txBody) (phase, error)
	// retryable reports a serialization failure or deadlock (pgerr or
	// mysqlerr IsRetryable).
	retryable(err error) bool
	// code returns the SQLSTATE or error number of err, or "none".
	code(err error) string
	// notCommitted reports whether a COMMIT error proves that the
	// transaction did not commit (the server answered, or nothing was sent).
	notCommitted(err error) bool
	// isolation is the level of every transaction: SERIALIZABLE, except
	// on TiDB (see driverSpec.lockingReads).
	isolation() sql.IsolationLevel
	close()
}

// driverSpec is a driver selectable with -driver.
type driverSpec struct {
	name    string
	dialect dialect
	open    func(ctx context.Context, dsn string, conns int) (conn, error)
	// lockingReads makes the workloads read their rows with SELECT … FOR
	// UPDATE, in TiDB's default REPEATABLE READ instead of SERIALIZABLE.
	// TiDB refuses SERIALIZABLE (8048) unless
	// tidb_skip_isolation_level_check=1, and then runs pessimistic
	// transactions as snapshot isolation that fails (9007, not in txretry's
	// default class) every read, locking or not, of a row committed since
	// the transaction began: half the calls of the hot row failed so. Under
	// REPEATABLE READ a plain read followed by a write of the value read
	// loses the other transaction's update without any error; a locking
	// read reads the latest committed row and holds it. All seen on TiDB in
	// unistore mode.
	lockingReads bool
}

// driverTiDB is the name of the TiDB driver.
const driverTiDB = "tidb"

var allDrivers = []driverSpec{
	{name: "pgx", dialect: dialectPG, open: openPgx},
	{name: "mysql", dialect: dialectMySQL, open: openMySQL},
	{name: "pgxstdlib", dialect: dialectPG, open: openPgxStdlib},
	{name: driverTiDB, dialect: dialectMySQL, open: openTiDB, lockingReads: true},
}

// --- pgx native ---

type pgxConn struct{ pool *pgxpool.Pool }

func openPgx(ctx context.Context, dsn string, conns int) (conn, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse PostgreSQL DSN: %w", err)
	}
	cfg.MaxConns = int32(min(conns, 1<<20))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pgx pool: %w", err)
	}
	// Warm up: one open connection per worker before the run starts.
	held := make([]*pgxpool.Conn, 0, conns)
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	for range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
		}
		held = append(held, c)
	}
	return &pgxConn{pool: pool}, nil
}

func (c *pgxConn) exec(ctx context.Context, q string) error {
	_, err := c.pool.Exec(ctx, q)
	return err
}

func (c *pgxConn) queryInts(ctx context.Context, q string, ncol int) ([]int64, error) {
	rows, err := c.pool.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanInts(rows, ncol)
}

func (c *pgxConn) runTxretry(ctx context.Context, cl callClass, methodValue bool, body txBody, opts []txretry.Option) error {
	if methodValue {
		return pgxretry.RunInTx(ctx, c.pool, (&pgxCall{body}).method(cl), opts...)
	}
	return pgxretry.RunInTx(ctx, c.pool, pgxFn(cl, body), opts...)
}

// pgxFn returns the fn that runs body in a pgx transaction: a literal of its
// own per class of call, so that txretry, which keys its contention control
// on the fn's code pointer, tells the classes apart.
func pgxFn(cl callClass, body txBody) func(context.Context, pgx.Tx) error {
	if cl == classHot {
		return func(ctx context.Context, tx pgx.Tx) error { return body(ctx, pgxTx{tx}) }
	}
	return func(ctx context.Context, tx pgx.Tx) error { return body(ctx, pgxTx{tx}) }
}

func (c *pgxConn) attempt(ctx context.Context, body txBody) (phase, error) {
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
	if err != nil {
		return phaseBegin, err
	}
	if err := body(ctx, pgxTx{tx}); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		_ = tx.Rollback(rctx) // the attempt already failed; a failed rollback closes the connection
		cancel()
		return phaseBody, err
	}
	return phaseCommit, tx.Commit(ctx)
}

func (c *pgxConn) retryable(err error) bool    { return pgerr.IsRetryable(err) }
func (c *pgxConn) code(err error) string       { return pgCode(err) }
func (c *pgxConn) notCommitted(err error) bool { return pgNotCommitted(err) }
func (c *pgxConn) close()                      { c.pool.Close() }

func (c *pgxConn) isolation() sql.IsolationLevel { return sql.LevelSerializable }

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) queryInt(ctx context.Context, q string, args ...any) (int64, error) {
	var v int64
	err := t.tx.QueryRow(ctx, q, args...).Scan(&v)
	return v, err
}

func (t pgxTx) queryInts(ctx context.Context, q string, ncol int, args ...any) ([]int64, error) {
	rows, err := t.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanInts(rows, ncol)
}

func (t pgxTx) exec(ctx context.Context, q string, args ...any) error {
	_, err := t.tx.Exec(ctx, q, args...)
	return err
}

func (t pgxTx) execCount(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, q, args...)
	return tag.RowsAffected(), err
}

// scanner is what scanInts needs from pgx.Rows and *sql.Rows.
type scanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

func scanInts(rows scanner, ncol int) ([]int64, error) {
	var out []int64
	row := make([]int64, ncol)
	dest := make([]any, ncol)
	for i := range row {
		dest[i] = &row[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, row...)
	}
	return out, rows.Err()
}

func pgCode(err error) string {
	if s := pgerr.SQLState(err); s != "" {
		return s
	}
	return "none"
}

// pgNotCommitted: the server answered COMMIT with an error that is not one of
// the "outcome unknown" codes, or answered with ROLLBACK, or nothing was sent.
func pgNotCommitted(err error) bool {
	if pgerr.SQLState(err) != "" {
		return !pgerr.IsAmbiguousCommit(err) && !pgerr.Has(err, "57014", "57P01", "57P02", "57P03") &&
			pgerr.SQLState(err)[:2] != "08"
	}
	return errors.Is(err, pgx.ErrTxCommitRollback) || pgconn.SafeToRetry(err) ||
		errors.Is(err, sql.ErrTxDone) || errors.Is(err, driver.ErrBadConn)
}

// --- database/sql (go-sql-driver/mysql, pgx stdlib) ---

type sqlConn struct {
	db     *sql.DB
	flavor dialect
	iso    sql.IsolationLevel
}

func openMySQL(ctx context.Context, dsn string, conns int) (conn, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse MySQL DSN: %w", err)
	}
	if _, set := cfg.Params["interpolateParams"]; !set {
		cfg.InterpolateParams = true
	}
	return openSQL(ctx, "mysql", cfg.FormatDSN(), dialectMySQL, sql.LevelSerializable, conns)
}

// openTiDB opens go-sql-driver on a TiDB server. Every connection runs in
// pessimistic mode (TiDB's default, made explicit; the DSN can override it)
// and every transaction in REPEATABLE READ (see driverSpec.lockingReads).
func openTiDB(ctx context.Context, dsn string, conns int) (conn, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse TiDB DSN: %w", err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if _, set := cfg.Params["tidb_txn_mode"]; !set {
		cfg.Params["tidb_txn_mode"] = "'pessimistic'"
	}
	cfg.InterpolateParams = true
	return openSQL(ctx, "mysql", cfg.FormatDSN(), dialectMySQL, sql.LevelRepeatableRead, conns)
}

func openPgxStdlib(ctx context.Context, dsn string, conns int) (conn, error) {
	return openSQL(ctx, "pgx", dsn, dialectPG, sql.LevelSerializable, conns)
}

func openSQL(ctx context.Context, driverName, dsn string, d dialect, iso sql.IsolationLevel, conns int) (conn, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", driverName, err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	held := make([]*sql.Conn, 0, conns)
	defer func() {
		for _, c := range held {
			_ = c.Close() // returns the connection to the pool
		}
	}()
	for range conns {
		c, err := db.Conn(ctx)
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("connect with %s: %w", driverName, err)
		}
		held = append(held, c)
	}
	return &sqlConn{db: db, flavor: d, iso: iso}, nil
}

func (c *sqlConn) exec(ctx context.Context, q string) error {
	_, err := c.db.ExecContext(ctx, q)
	return err
}

func (c *sqlConn) queryInts(ctx context.Context, q string, ncol int) ([]int64, error) {
	rows, err := c.db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanInts(rows, ncol)
}

func (c *sqlConn) runTxretry(ctx context.Context, cl callClass, methodValue bool, body txBody, opts []txretry.Option) error {
	if methodValue {
		return txretry.RunInTx(ctx, c.db, (&sqlCall{body}).method(cl), opts...)
	}
	return txretry.RunInTx(ctx, c.db, sqlFn(cl, body), opts...)
}

// sqlFn returns the fn that runs body in a database/sql transaction: a
// literal of its own per class of call, as pgxFn.
func sqlFn(cl callClass, body txBody) func(context.Context, *sql.Tx) error {
	if cl == classHot {
		return func(ctx context.Context, tx *sql.Tx) error { return body(ctx, sqlTx{tx}) }
	}
	return func(ctx context.Context, tx *sql.Tx) error { return body(ctx, sqlTx{tx}) }
}

func (c *sqlConn) attempt(ctx context.Context, body txBody) (phase, error) {
	tx, err := c.db.BeginTx(ctx, &sql.TxOptions{Isolation: c.iso})
	if err != nil {
		return phaseBegin, err
	}
	if err := body(ctx, sqlTx{tx}); err != nil {
		_ = tx.Rollback() // the attempt already failed
		return phaseBody, err
	}
	return phaseCommit, tx.Commit()
}

func (c *sqlConn) retryable(err error) bool {
	if c.flavor == dialectMySQL {
		return mysqlerr.IsRetryable(err)
	}
	return pgerr.IsRetryable(err)
}

func (c *sqlConn) code(err error) string {
	if c.flavor == dialectMySQL {
		if n, ok := mysqlerr.Number(err); ok {
			return strconv.Itoa(int(n))
		}
		return "none"
	}
	return pgCode(err)
}

// notCommitted: database/sql returns ErrTxDone from Commit only when it did
// not call the driver's Commit (the transaction was rolled back when its
// context ended); a server error number or SQLSTATE means the server
// answered; driver.ErrBadConn means nothing was sent. The context's error
// proves nothing with pgx's stdlib, which commits under the BeginTx context
// and abandons a COMMIT in flight when it ends (go-sql-driver's COMMIT does
// not watch it, so there the error can only come from database/sql's check
// before calling the driver).
func (c *sqlConn) notCommitted(err error) bool {
	if errors.Is(err, sql.ErrTxDone) || errors.Is(err, driver.ErrBadConn) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return c.flavor == dialectMySQL
	}
	if c.flavor == dialectMySQL {
		_, ok := mysqlerr.Number(err)
		return ok
	}
	return pgNotCommitted(err)
}

func (c *sqlConn) close() { _ = c.db.Close() }

func (c *sqlConn) isolation() sql.IsolationLevel { return c.iso }

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) queryInt(ctx context.Context, q string, args ...any) (int64, error) {
	var v int64
	err := t.tx.QueryRowContext(ctx, q, args...).Scan(&v)
	return v, err
}

func (t sqlTx) queryInts(ctx context.Context, q string, ncol int, args ...any) ([]int64, error) {
	rows, err := t.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanInts(rows, ncol)
}

func (t sqlTx) exec(ctx context.Context, q string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, q, args...)
	return err
}

func (t sqlTx) execCount(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// pgxCall and sqlCall are one call's transaction as a value whose methods,
// one per class, are the fns of the workloads with methodValues: method
// values of one type per driver, as a user passes the methods of a
// repository or service type. They are not one generic type: the compiler
// makes a generic type's method values closures of their own, unlike a
// plain type's.
type (
	pgxCall struct{ body txBody }
	sqlCall struct{ body txBody }
)

func (c *pgxCall) hot(ctx context.Context, tx pgx.Tx) error         { return c.body(ctx, pgxTx{tx}) }
func (c *pgxCall) cold(ctx context.Context, tx pgx.Tx) error        { return c.body(ctx, pgxTx{tx}) }
func (c *pgxCall) newOrder(ctx context.Context, tx pgx.Tx) error    { return c.body(ctx, pgxTx{tx}) }
func (c *pgxCall) payment(ctx context.Context, tx pgx.Tx) error     { return c.body(ctx, pgxTx{tx}) }
func (c *pgxCall) orderStatus(ctx context.Context, tx pgx.Tx) error { return c.body(ctx, pgxTx{tx}) }
func (c *pgxCall) delivery(ctx context.Context, tx pgx.Tx) error    { return c.body(ctx, pgxTx{tx}) }
func (c *pgxCall) stockLevel(ctx context.Context, tx pgx.Tx) error  { return c.body(ctx, pgxTx{tx}) }

// method returns the method value of class cl.
func (c *pgxCall) method(cl callClass) func(context.Context, pgx.Tx) error {
	return [nClasses]func(context.Context, pgx.Tx) error{c.hot, c.cold, c.newOrder, c.payment, c.orderStatus, c.delivery, c.stockLevel}[cl]
}

func (c *sqlCall) hot(ctx context.Context, tx *sql.Tx) error         { return c.body(ctx, sqlTx{tx}) }
func (c *sqlCall) cold(ctx context.Context, tx *sql.Tx) error        { return c.body(ctx, sqlTx{tx}) }
func (c *sqlCall) newOrder(ctx context.Context, tx *sql.Tx) error    { return c.body(ctx, sqlTx{tx}) }
func (c *sqlCall) payment(ctx context.Context, tx *sql.Tx) error     { return c.body(ctx, sqlTx{tx}) }
func (c *sqlCall) orderStatus(ctx context.Context, tx *sql.Tx) error { return c.body(ctx, sqlTx{tx}) }
func (c *sqlCall) delivery(ctx context.Context, tx *sql.Tx) error    { return c.body(ctx, sqlTx{tx}) }
func (c *sqlCall) stockLevel(ctx context.Context, tx *sql.Tx) error  { return c.body(ctx, sqlTx{tx}) }

// method returns the method value of class cl.
func (c *sqlCall) method(cl callClass) func(context.Context, *sql.Tx) error {
	return [nClasses]func(context.Context, *sql.Tx) error{c.hot, c.cold, c.newOrder, c.payment, c.orderStatus, c.delivery, c.stockLevel}[cl]
}

// useIsolation makes c run its transactions at wl's isolation level when
// the workload sets one (oltp on MySQL and MariaDB; only database/sql
// connections run at another level than SERIALIZABLE).
func useIsolation(c conn, wl *workloadRun) {
	if s, ok := c.(*sqlConn); ok && wl.iso != sql.LevelDefault {
		s.iso = wl.iso
	}
}
