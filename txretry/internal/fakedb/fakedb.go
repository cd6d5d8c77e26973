package fakedb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrPrepareNotSupported is returned by a connection's Prepare method. The
// fake implements driver.ExecerContext and driver.QueryerContext, which
// database/sql uses instead of prepared statements.
var ErrPrepareNotSupported = errors.New("fakedb: Prepare not supported")

var (
	errTxDone       = errors.New("fakedb: transaction already finished")
	errTxInProgress = errors.New("fakedb: transaction already in progress on this connection")
)

// Driver is a scripted database/sql driver. Set the hooks before calling DB
// or Connector; do not change them afterwards. A nil hook means "succeed".
//
// The argument n of a hook is the 1-based count of that operation across
// the whole Driver (all connections and all pools), including the current
// call. An operation is counted, logged and handed to its hook only once it
// gets past the fake's own checks: one whose context is already done returns
// ctx.Err() and is neither counted nor logged.
//
// If a hook returns an error that wraps driver.ErrBadConn, the connection it
// ran on is marked bad: from then on it fails Ping and ResetSession with
// driver.ErrBadConn and IsValid reports false, so database/sql discards it.
// The hooks themselves keep being called on a bad connection.
//
// Hooks may be called concurrently from several goroutines and may call
// Stats and Log. A Driver must not be copied after first use.
type Driver struct {
	// OnConnect is called when database/sql opens a new driver
	// connection; n counts connection attempts. An error is returned from
	// the connector and no connection is opened.
	OnConnect func(n int) error
	// OnBegin is called when a transaction begins, with the options
	// database/sql passed. An error makes BeginTx fail and no transaction
	// is started.
	OnBegin func(ctx context.Context, n int, opts driver.TxOptions) error
	// OnExec is called for every Exec, inside or outside a transaction.
	// Without an error the result reports 0 rows affected.
	OnExec func(ctx context.Context, n int, query string, args []driver.NamedValue) error
	// OnQuery is called for every Query, inside or outside a transaction,
	// and scripts its result: every row must hold len(columns) values of
	// the types driver.Value allows. A nil hook returns no columns and no
	// rows.
	OnQuery func(ctx context.Context, n int, query string, args []driver.NamedValue) (columns []string, rows [][]driver.Value, err error)
	// OnCommit is called when a transaction commits. The transaction ends
	// whatever it returns, as with a real driver.
	OnCommit func(n int) error
	// OnRollback is called when a transaction rolls back. The transaction
	// ends whatever it returns.
	OnRollback func(n int) error
	// NoLog keeps the counters but not the call log, whose growth would
	// dominate a long benchmark.
	NoLog bool

	mu       sync.Mutex
	connects int // connection attempts, the n of OnConnect
	stats    Stats
	log      []string
}

// Stats is a snapshot of a Driver's counters.
type Stats struct {
	// Conns is the number of driver connections ever opened.
	Conns int
	// OpenConns is the number of driver connections open now.
	OpenConns int
	// Begins is the number of BeginTx calls handed to OnBegin, failed ones
	// included.
	Begins int
	// Commits is the number of Commit calls handed to OnCommit, failed
	// ones included.
	Commits int
	// Rollbacks is the number of Rollback calls handed to OnRollback,
	// failed ones included.
	Rollbacks int
	// Execs is the number of Exec calls handed to OnExec, failed ones
	// included.
	Execs int
	// Queries is the number of Query calls handed to OnQuery, failed ones
	// included.
	Queries int
	// ActiveTx is the number of transactions begun successfully and not
	// yet ended by Commit, Rollback or the close of their connection.
	ActiveTx int
	// LastTxOptions holds the options of the most recent BeginTx call
	// handed to OnBegin; the zero value before the first one.
	LastTxOptions driver.TxOptions
}

// DB returns a new *sql.DB whose connections come from d. Each call returns
// a new pool; all pools share d's hooks, counters and log. The caller must
// close it.
func (d *Driver) DB() *sql.DB {
	return sql.OpenDB(d.Connector())
}

// Connector returns a driver.Connector whose connections are scripted by d.
func (d *Driver) Connector() driver.Connector {
	return connector{d: d}
}

// Stats returns a snapshot of d's counters. It is safe for concurrent use.
func (d *Driver) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Log returns the operations handed to the hooks so far, in order, across
// all connections: "begin", "exec <query>", "query <query>", "commit",
// "rollback", and "close" when a connection is closed. Arguments are not
// logged. It is safe for concurrent use.
func (d *Driver) Log() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.log...)
}

// count increments *counter and appends entry to the log under d.mu and
// returns the new count.
// record appends entry to the call log; d.mu must be held.
func (d *Driver) record(entry string) {
	if !d.NoLog {
		d.log = append(d.log, entry)
	}
}

func (d *Driver) count(counter *int, entry string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	*counter++
	d.record(entry)
	return *counter
}

// SQLStateError is an error carrying a SQLSTATE code, shaped like pgx's
// *pgconn.PgError: it has an SQLState method. Hooks return it to simulate a
// database error such as a serialization failure (Code "40001") or a
// deadlock (Code "40P01"). Both SQLStateError and *SQLStateError implement
// error.
type SQLStateError struct {
	// Code is the five-character SQLSTATE code.
	Code string
	// Message is the human-readable message.
	Message string
}

// Error returns the message followed by the SQLSTATE code.
func (e SQLStateError) Error() string {
	return fmt.Sprintf("fakedb: %s (SQLSTATE %s)", e.Message, e.Code)
}

// SQLState returns the SQLSTATE code.
func (e SQLStateError) SQLState() string {
	return e.Code
}

// connector implements driver.Connector for a Driver.
type connector struct {
	d *Driver
}

var _ driver.Connector = connector{}

// Connect opens a new scripted connection.
func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := c.d
	d.mu.Lock()
	d.connects++
	n := d.connects
	d.mu.Unlock()
	if d.OnConnect != nil {
		if err := d.OnConnect(n); err != nil {
			return nil, err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats.Conns++
	d.stats.OpenConns++
	return &conn{d: d}, nil
}

// Driver returns a driver.Driver whose Open ignores its name and connects
// through c.
func (c connector) Driver() driver.Driver {
	return openDriver(c)
}

// openDriver implements driver.Driver on top of a connector.
type openDriver connector

// Open connects, ignoring name.
func (o openDriver) Open(string) (driver.Conn, error) {
	return connector(o).Connect(context.Background())
}

// conn is one scripted driver connection. database/sql never uses a
// connection from two goroutines at once, except that a Tx may be rolled
// back from its context watcher; its fields are guarded by d.mu.
type conn struct {
	d      *Driver
	bad    bool // a hook returned driver.ErrBadConn
	closed bool
	tx     *tx // the transaction in progress, if any
}

var (
	_ driver.Conn                    = (*conn)(nil)
	_ driver.ConnBeginTx             = (*conn)(nil)
	_ driver.ExecerContext           = (*conn)(nil)
	_ driver.QueryerContext          = (*conn)(nil)
	_ driver.Pinger                  = (*conn)(nil)
	_ driver.Validator               = (*conn)(nil)
	_ driver.SessionResetter         = (*conn)(nil)
	_ driver.Tx                      = (*tx)(nil)
	_ driver.Rows                    = (*rows)(nil)
	_ error                          = SQLStateError{}
	_ interface{ SQLState() string } = (*SQLStateError)(nil)
)

// fail marks c bad if err wraps driver.ErrBadConn and returns err.
func (c *conn) fail(err error) error {
	if errors.Is(err, driver.ErrBadConn) {
		c.d.mu.Lock()
		c.bad = true
		c.d.mu.Unlock()
	}
	return err
}

// usable reports driver.ErrBadConn for a closed connection and ctx.Err()
// for a done context.
func (c *conn) usable(ctx context.Context) error {
	c.d.mu.Lock()
	closed := c.closed
	c.d.mu.Unlock()
	if closed {
		return driver.ErrBadConn
	}
	return ctx.Err()
}

// Prepare always fails with ErrPrepareNotSupported.
func (c *conn) Prepare(string) (driver.Stmt, error) {
	return nil, ErrPrepareNotSupported
}

// Close closes the connection. A transaction still in progress ends without
// a rollback being counted, as when a server drops a session.
func (c *conn) Close() error {
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	d.stats.OpenConns--
	d.record("close")
	if c.tx != nil {
		c.tx.done = true
		c.tx = nil
		d.stats.ActiveTx--
	}
	return nil
}

// Begin starts a transaction with default options.
//
// Deprecated: database/sql uses BeginTx.
func (c *conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx records opts, calls OnBegin and starts a transaction unless it
// fails.
func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	d := c.d
	d.mu.Lock()
	if c.tx != nil {
		d.mu.Unlock()
		return nil, errTxInProgress
	}
	d.stats.Begins++
	n := d.stats.Begins
	d.stats.LastTxOptions = opts
	d.record("begin")
	d.mu.Unlock()

	if d.OnBegin != nil {
		if err := d.OnBegin(ctx, n, opts); err != nil {
			return nil, c.fail(err)
		}
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if c.closed {
		return nil, driver.ErrBadConn
	}
	t := &tx{c: c}
	c.tx = t
	d.stats.ActiveTx++
	return t, nil
}

// ExecContext calls OnExec and reports 0 rows affected unless it fails.
func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	d := c.d
	n := d.count(&d.stats.Execs, "exec "+query)
	if d.OnExec != nil {
		if err := d.OnExec(ctx, n, query, args); err != nil {
			return nil, c.fail(err)
		}
	}
	return driver.RowsAffected(0), nil
}

// QueryContext calls OnQuery and returns the rows it scripts.
func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	d := c.d
	n := d.count(&d.stats.Queries, "query "+query)
	if d.OnQuery == nil {
		return &rows{}, nil
	}
	columns, values, err := d.OnQuery(ctx, n, query, args)
	if err != nil {
		return nil, c.fail(err)
	}
	return &rows{columns: columns, values: values}, nil
}

// Ping fails with driver.ErrBadConn on a bad connection.
func (c *conn) Ping(ctx context.Context) error {
	if err := c.usable(ctx); err != nil {
		return err
	}
	if !c.IsValid() {
		return driver.ErrBadConn
	}
	return nil
}

// ResetSession fails with driver.ErrBadConn on a bad connection.
func (c *conn) ResetSession(context.Context) error {
	if !c.IsValid() {
		return driver.ErrBadConn
	}
	return nil
}

// IsValid reports whether the connection is open and no hook has returned
// driver.ErrBadConn on it.
func (c *conn) IsValid() bool {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	return !c.bad && !c.closed
}

// tx is a scripted transaction.
type tx struct {
	c    *conn
	done bool // guarded by c.d.mu
}

// Commit calls OnCommit; the transaction ends whatever it returns.
func (t *tx) Commit() error {
	d := t.c.d
	return t.end(&d.stats.Commits, "commit", d.OnCommit)
}

// Rollback calls OnRollback; the transaction ends whatever it returns.
func (t *tx) Rollback() error {
	d := t.c.d
	return t.end(&d.stats.Rollbacks, "rollback", d.OnRollback)
}

// end counts and logs the operation, calls hook and then ends t. The
// transaction counts as active while the hook runs.
func (t *tx) end(counter *int, entry string, hook func(int) error) error {
	c := t.c
	d := c.d
	d.mu.Lock()
	if t.done {
		d.mu.Unlock()
		return errTxDone
	}
	t.done = true
	*counter++
	n := *counter
	d.record(entry)
	d.mu.Unlock()

	var err error
	if hook != nil {
		err = hook(n)
	}

	d.mu.Lock()
	if c.tx == t { // not already ended by Close
		c.tx = nil
		d.stats.ActiveTx--
	}
	d.mu.Unlock()
	return c.fail(err)
}

// rows is a scripted result set.
type rows struct {
	columns []string
	values  [][]driver.Value
	next    int // index of the next row
}

// Columns returns the scripted column names.
func (r *rows) Columns() []string {
	return r.columns
}

// Close discards the remaining rows.
func (r *rows) Close() error {
	r.next = len(r.values)
	return nil
}

// Next copies the next scripted row into dest.
func (r *rows) Next(dest []driver.Value) error {
	if r.next >= len(r.values) {
		return io.EOF
	}
	row := r.values[r.next]
	if len(row) != len(dest) {
		return fmt.Errorf("fakedb: row %d has %d values for %d columns", r.next+1, len(row), len(dest))
	}
	r.next++
	copy(dest, row)
	return nil
}
