package fakedb_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/txretry/txretry/txretry/internal/fakedb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// openDB returns a pool over d that is closed when the test ends.
func openDB(t *testing.T, d *fakedb.Driver) *sql.DB {
	t.Helper()
	db := d.DB()
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// waitFor polls cond until it holds or a second has passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCountsAndLog(t *testing.T) {
	d := &fakedb.Driver{}
	db := openDB(t, d)
	ctx := context.Background()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE t SET v = ?", 1); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}

	opts := &sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true}
	tx, err = db.BeginTx(ctx, opts)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	rows, err := tx.QueryContext(ctx, "SELECT 1")
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	if err := rows.Close(); err != nil {
		t.Fatalf("rows.Close: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("Rollback: %v", err)
	}

	want := fakedb.Stats{
		Conns: 1, OpenConns: 1, Begins: 2, Commits: 1, Rollbacks: 1, Execs: 1, Queries: 1,
		LastTxOptions: driver.TxOptions{Isolation: driver.IsolationLevel(sql.LevelSerializable), ReadOnly: true},
	}
	if got := d.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}

	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantLog := []string{"begin", "exec UPDATE t SET v = ?", "commit", "begin", "query SELECT 1", "rollback", "close"}
	if got := d.Log(); !slices.Equal(got, wantLog) {
		t.Errorf("Log() = %q, want %q", got, wantLog)
	}
	if got := d.Stats().OpenConns; got != 0 {
		t.Errorf("OpenConns after Close = %d, want 0", got)
	}
}

func TestHookArguments(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	record := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf(format, a...))
	}
	d := &fakedb.Driver{
		OnConnect: func(n int) error { record("connect %d", n); return nil },
		OnBegin: func(_ context.Context, n int, opts driver.TxOptions) error {
			record("begin %d %d %t", n, opts.Isolation, opts.ReadOnly)
			return nil
		},
		OnExec: func(_ context.Context, n int, query string, args []driver.NamedValue) error {
			record("exec %d %s %v", n, query, args[0].Value)
			return nil
		},
		OnQuery: func(_ context.Context, n int, query string, args []driver.NamedValue) ([]string, [][]driver.Value, error) {
			record("query %d %s %d", n, query, len(args))
			return nil, nil, nil
		},
		OnCommit:   func(n int) error { record("commit %d", n); return nil },
		OnRollback: func(n int) error { record("rollback %d", n); return nil },
	}
	db := openDB(t, d)
	ctx := context.Background()

	for range 2 {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
		if err != nil {
			t.Fatalf("BeginTx: %v", err)
		}
		if _, err := tx.ExecContext(ctx, "X", 7); err != nil {
			t.Fatalf("Exec: %v", err)
		}
		if err := tx.QueryRowContext(ctx, "Q").Scan(); !errors.Is(err, sql.ErrNoRows) {
			t.Fatalf("QueryRow.Scan: %v, want sql.ErrNoRows", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("Rollback: %v", err)
	}

	want := []string{
		"connect 1",
		"begin 1 4 false", "exec 1 X 7", "query 1 Q 0", "commit 1",
		"begin 2 4 false", "exec 2 X 7", "query 2 Q 0", "commit 2",
		"begin 3 0 false", "rollback 1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("hook calls = %q, want %q", got, want)
	}
}

var errHook = errors.New("scripted failure")

func TestHookErrorsSurface(t *testing.T) {
	fail := func(int) error { return errHook }
	tests := []struct {
		name      string
		driver    *fakedb.Driver
		run       func(context.Context, *sql.DB) error
		wantStats fakedb.Stats
	}{
		{
			name:   "connect",
			driver: &fakedb.Driver{OnConnect: fail},
			run:    func(ctx context.Context, db *sql.DB) error { return db.PingContext(ctx) },
		},
		{
			name: "begin",
			driver: &fakedb.Driver{OnBegin: func(context.Context, int, driver.TxOptions) error {
				return errHook
			}},
			run: func(ctx context.Context, db *sql.DB) error {
				_, err := db.BeginTx(ctx, nil)
				return err
			},
			wantStats: fakedb.Stats{Conns: 1, OpenConns: 1, Begins: 1},
		},
		{
			name: "exec",
			driver: &fakedb.Driver{OnExec: func(context.Context, int, string, []driver.NamedValue) error {
				return errHook
			}},
			run: func(ctx context.Context, db *sql.DB) error {
				_, err := db.ExecContext(ctx, "X")
				return err
			},
			wantStats: fakedb.Stats{Conns: 1, OpenConns: 1, Execs: 1},
		},
		{
			name: "query",
			driver: &fakedb.Driver{OnQuery: func(context.Context, int, string, []driver.NamedValue) ([]string, [][]driver.Value, error) {
				return nil, nil, errHook
			}},
			run: func(ctx context.Context, db *sql.DB) error {
				return db.QueryRowContext(ctx, "Q").Scan()
			},
			wantStats: fakedb.Stats{Conns: 1, OpenConns: 1, Queries: 1},
		},
		{
			name:   "commit",
			driver: &fakedb.Driver{OnCommit: fail},
			run: func(ctx context.Context, db *sql.DB) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				return tx.Commit()
			},
			wantStats: fakedb.Stats{Conns: 1, OpenConns: 1, Begins: 1, Commits: 1},
		},
		{
			name:   "rollback",
			driver: &fakedb.Driver{OnRollback: fail},
			run: func(ctx context.Context, db *sql.DB) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				return tx.Rollback()
			},
			wantStats: fakedb.Stats{Conns: 1, OpenConns: 1, Begins: 1, Rollbacks: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := openDB(t, tt.driver)
			if err := tt.run(context.Background(), db); !errors.Is(err, errHook) {
				t.Errorf("error = %v, want %v", err, errHook)
			}
			if got := tt.driver.Stats(); got != tt.wantStats {
				t.Errorf("Stats() = %+v, want %+v", got, tt.wantStats)
			}
		})
	}
}

func TestSQLStateError(t *testing.T) {
	d := &fakedb.Driver{OnCommit: func(int) error {
		return &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
	}}
	db := openDB(t, d)
	tx, err := db.Begin()
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	err = fmt.Errorf("wrapped: %w", tx.Commit())

	var state interface{ SQLState() string }
	if !errors.As(err, &state) {
		t.Fatalf("errors.As(%v, SQLState) = false, want true", err)
	}
	if got := state.SQLState(); got != "40001" {
		t.Errorf("SQLState() = %q, want %q", got, "40001")
	}
	const wantMsg = "wrapped: fakedb: could not serialize access (SQLSTATE 40001)"
	if got := err.Error(); got != wantMsg {
		t.Errorf("Error() = %q, want %q", got, wantMsg)
	}
	var value error = fakedb.SQLStateError{Code: "40P01", Message: "deadlock detected"}
	if !errors.As(value, &state) || state.SQLState() != "40P01" {
		t.Errorf("SQLStateError value: SQLState not found via errors.As")
	}
}

func TestActiveTx(t *testing.T) {
	d := &fakedb.Driver{}
	var activeDuringCommit int
	d.OnCommit = func(n int) error {
		activeDuringCommit = d.Stats().ActiveTx
		return errHook
	}
	db := openDB(t, d)

	tx1, err := db.Begin()
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	tx2, err := db.Begin()
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if got := d.Stats().ActiveTx; got != 2 {
		t.Errorf("ActiveTx with two transactions = %d, want 2", got)
	}
	if err := tx1.Commit(); !errors.Is(err, errHook) {
		t.Errorf("Commit = %v, want %v", err, errHook)
	}
	if activeDuringCommit != 2 {
		t.Errorf("ActiveTx during commit = %d, want 2", activeDuringCommit)
	}
	if got := d.Stats().ActiveTx; got != 1 {
		t.Errorf("ActiveTx after failed commit = %d, want 1", got)
	}
	if err := tx2.Rollback(); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if got := d.Stats().ActiveTx; got != 0 {
		t.Errorf("ActiveTx after rollback = %d, want 0", got)
	}
}

func TestBadConnDiscardedAfterTxError(t *testing.T) {
	tests := []struct {
		name   string
		driver *fakedb.Driver
		run    func(*sql.Tx) error
	}{
		{
			name: "exec",
			driver: &fakedb.Driver{OnExec: func(context.Context, int, string, []driver.NamedValue) error {
				return driver.ErrBadConn
			}},
			run: func(tx *sql.Tx) error {
				_, err := tx.Exec("X")
				return errors.Join(err, tx.Rollback())
			},
		},
		{
			name: "query",
			driver: &fakedb.Driver{OnQuery: func(context.Context, int, string, []driver.NamedValue) ([]string, [][]driver.Value, error) {
				return nil, nil, fmt.Errorf("lost: %w", driver.ErrBadConn)
			}},
			run: func(tx *sql.Tx) error {
				_, err := tx.Query("Q")
				return errors.Join(err, tx.Rollback())
			},
		},
		{
			name:   "commit",
			driver: &fakedb.Driver{OnCommit: func(int) error { return driver.ErrBadConn }},
			run:    (*sql.Tx).Commit,
		},
		{
			name:   "rollback",
			driver: &fakedb.Driver{OnRollback: func(int) error { return driver.ErrBadConn }},
			run:    (*sql.Tx).Rollback,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := openDB(t, tt.driver)
			tx, err := db.Begin()
			if err != nil {
				t.Fatalf("Begin: %v", err)
			}
			if err := tt.run(tx); !errors.Is(err, driver.ErrBadConn) {
				t.Errorf("error = %v, want driver.ErrBadConn", err)
			}
			st := tt.driver.Stats()
			if st.OpenConns != 0 || st.ActiveTx != 0 {
				t.Errorf("OpenConns, ActiveTx = %d, %d, want 0, 0", st.OpenConns, st.ActiveTx)
			}
			if got := tt.driver.Log(); got[len(got)-1] != "close" {
				t.Errorf("Log() = %q, want it to end with close", got)
			}
			// The pool opens a fresh connection for the next transaction.
			tx, err = db.Begin()
			if err != nil {
				t.Fatalf("second Begin: %v", err)
			}
			if got := tt.driver.Stats().Conns; got != 2 {
				t.Errorf("Conns after second Begin = %d, want 2", got)
			}
			_ = tx.Rollback()
		})
	}
}

func TestBadConnOnBeginIsRetriedByPool(t *testing.T) {
	d := &fakedb.Driver{OnBegin: func(_ context.Context, n int, _ driver.TxOptions) error {
		if n == 1 {
			return driver.ErrBadConn
		}
		return nil
	}}
	db := openDB(t, d)
	tx, err := db.Begin()
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	defer func() { _ = tx.Rollback() }()
	want := fakedb.Stats{Conns: 2, OpenConns: 1, Begins: 2, ActiveTx: 1}
	if got := d.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

func TestBadConnFailsPoolChecks(t *testing.T) {
	d := &fakedb.Driver{OnExec: func(context.Context, int, string, []driver.NamedValue) error {
		return driver.ErrBadConn
	}}
	ctx := context.Background()
	c, err := d.Connector().Connect(ctx)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer c.Close()
	if err := c.(driver.Pinger).Ping(ctx); err != nil {
		t.Errorf("Ping before failure = %v, want nil", err)
	}
	if _, err := c.(driver.ExecerContext).ExecContext(ctx, "X", nil); !errors.Is(err, driver.ErrBadConn) {
		t.Fatalf("Exec = %v, want driver.ErrBadConn", err)
	}
	if c.(driver.Validator).IsValid() {
		t.Error("IsValid after ErrBadConn = true, want false")
	}
	if err := c.(driver.Pinger).Ping(ctx); !errors.Is(err, driver.ErrBadConn) {
		t.Errorf("Ping = %v, want driver.ErrBadConn", err)
	}
	if err := c.(driver.SessionResetter).ResetSession(ctx); !errors.Is(err, driver.ErrBadConn) {
		t.Errorf("ResetSession = %v, want driver.ErrBadConn", err)
	}
}

func TestPrepareNotSupported(t *testing.T) {
	db := openDB(t, &fakedb.Driver{})
	if _, err := db.Prepare("X"); !errors.Is(err, fakedb.ErrPrepareNotSupported) {
		t.Errorf("Prepare = %v, want %v", err, fakedb.ErrPrepareNotSupported)
	}
}

func TestDoneContextSkipsHooks(t *testing.T) {
	called := func() error { return errors.New("hook called with a done context") }
	d := &fakedb.Driver{
		OnBegin: func(context.Context, int, driver.TxOptions) error { return called() },
		OnExec:  func(context.Context, int, string, []driver.NamedValue) error { return called() },
		OnQuery: func(context.Context, int, string, []driver.NamedValue) ([]string, [][]driver.Value, error) {
			return nil, nil, called()
		},
	}
	c, err := d.Connector().Connect(context.Background())
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name string
		run  func() error
	}{
		{"begin", func() error {
			_, err := c.(driver.ConnBeginTx).BeginTx(ctx, driver.TxOptions{})
			return err
		}},
		{"exec", func() error {
			_, err := c.(driver.ExecerContext).ExecContext(ctx, "X", nil)
			return err
		}},
		{"query", func() error {
			_, err := c.(driver.QueryerContext).QueryContext(ctx, "Q", nil)
			return err
		}},
		{"ping", func() error { return c.(driver.Pinger).Ping(ctx) }},
		{"connect", func() error {
			_, err := d.Connector().Connect(ctx)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); !errors.Is(err, context.Canceled) {
				t.Errorf("error = %v, want context.Canceled", err)
			}
		})
	}
	want := fakedb.Stats{Conns: 1, OpenConns: 1}
	if got := d.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

func TestContextCancelledDuringTx(t *testing.T) {
	d := &fakedb.Driver{OnExec: func(ctx context.Context, _ int, _ string, _ []driver.NamedValue) error {
		<-ctx.Done()
		return ctx.Err()
	}}
	db := openDB(t, d)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	go func() {
		for d.Stats().Execs == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	if _, err := tx.ExecContext(ctx, "SELECT pg_sleep(10)"); !errors.Is(err, context.Canceled) {
		t.Errorf("Exec = %v, want context.Canceled", err)
	}
	// database/sql rolls the transaction back; the connection implements
	// driver.SessionResetter, so the pool keeps it.
	waitFor(t, "rollback", func() bool {
		st := d.Stats()
		return st.Rollbacks == 1 && st.ActiveTx == 0
	})
	if err := tx.Commit(); err == nil {
		t.Error("Commit after cancellation = nil, want an error")
	}
	want := fakedb.Stats{Conns: 1, OpenConns: 1, Begins: 1, Execs: 1, Rollbacks: 1}
	if got := d.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

func TestQueryRowsScan(t *testing.T) {
	when := time.Date(2024, 2, 29, 12, 0, 0, 0, time.UTC)
	d := &fakedb.Driver{OnQuery: func(_ context.Context, _ int, _ string, args []driver.NamedValue) ([]string, [][]driver.Value, error) {
		return []string{"id", "name", "at", "ok"}, [][]driver.Value{
			{args[0].Value, "alice", when, true},
			{int64(2), nil, when.Add(time.Hour), false},
		}, nil
	}}
	db := openDB(t, d)
	rows, err := db.Query("SELECT id, name, at, ok FROM t WHERE id >= ?", 1)
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	defer rows.Close()

	cols, err := rows.Columns()
	if err != nil {
		t.Fatalf("Columns: %v", err)
	}
	if want := []string{"id", "name", "at", "ok"}; !slices.Equal(cols, want) {
		t.Errorf("Columns() = %q, want %q", cols, want)
	}

	type row struct {
		id   int64
		name sql.NullString
		at   time.Time
		ok   bool
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.name, &r.at, &r.ok); err != nil {
			t.Fatalf("Scan: %v", err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("rows.Err: %v", err)
	}
	want := []row{
		{1, sql.NullString{String: "alice", Valid: true}, when, true},
		{2, sql.NullString{}, when.Add(time.Hour), false},
	}
	if !slices.Equal(got, want) {
		t.Errorf("rows = %+v, want %+v", got, want)
	}
}

func TestQueryRowWidthMismatch(t *testing.T) {
	d := &fakedb.Driver{OnQuery: func(context.Context, int, string, []driver.NamedValue) ([]string, [][]driver.Value, error) {
		return []string{"a", "b"}, [][]driver.Value{{int64(1)}}, nil
	}}
	db := openDB(t, d)
	var a, b int64
	if err := db.QueryRow("Q").Scan(&a, &b); err == nil {
		t.Error("Scan of a short row = nil, want an error")
	}
}

func TestConcurrentUse(t *testing.T) {
	const (
		workers = 16
		perWork = 50
	)
	d := &fakedb.Driver{
		OnExec: func(_ context.Context, n int, _ string, _ []driver.NamedValue) error {
			if n%7 == 0 {
				return driver.ErrBadConn
			}
			return nil
		},
		OnQuery: func(context.Context, int, string, []driver.NamedValue) ([]string, [][]driver.Value, error) {
			return []string{"v"}, [][]driver.Value{{int64(1)}}, nil
		},
		OnCommit: func(n int) error {
			if n%5 == 0 {
				return &fakedb.SQLStateError{Code: "40001", Message: "could not serialize access"}
			}
			return nil
		},
	}
	// Two pools share the driver's counters.
	dbs := []*sql.DB{openDB(t, d), openDB(t, d)}
	for _, db := range dbs {
		db.SetMaxOpenConns(4)
		db.SetMaxIdleConns(4) // so that only bad connections are closed
	}
	ctx := context.Background()

	var wg sync.WaitGroup
	for w := range workers {
		db := dbs[w%len(dbs)]
		wg.Go(func() {
			for range perWork {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Errorf("BeginTx: %v", err)
					return
				}
				var v int64
				if err := tx.QueryRowContext(ctx, "Q").Scan(&v); err != nil {
					t.Errorf("Scan: %v", err)
				}
				if _, err := tx.ExecContext(ctx, "X"); err != nil {
					_ = tx.Rollback()
					continue
				}
				_ = tx.Commit()
				_ = d.Stats()
				_ = d.Log()
			}
		})
	}
	wg.Wait()

	st := d.Stats()
	if st.Begins != workers*perWork || st.Queries != workers*perWork || st.Execs != workers*perWork {
		t.Errorf("Begins, Queries, Execs = %d, %d, %d, want %d each", st.Begins, st.Queries, st.Execs, workers*perWork)
	}
	if got := st.Commits + st.Rollbacks; got != st.Begins {
		t.Errorf("Commits+Rollbacks = %d, want Begins = %d", got, st.Begins)
	}
	if st.Rollbacks != workers*perWork/7 {
		t.Errorf("Rollbacks = %d, want %d", st.Rollbacks, workers*perWork/7)
	}
	if st.ActiveTx != 0 {
		t.Errorf("ActiveTx = %d, want 0", st.ActiveTx)
	}
	if st.OpenConns > 8 || st.Conns-st.OpenConns != st.Rollbacks {
		t.Errorf("Conns, OpenConns = %d, %d with %d bad connections", st.Conns, st.OpenConns, st.Rollbacks)
	}
	log := d.Log()
	if got, want := len(log), 4*st.Begins+st.Conns-st.OpenConns; got != want {
		t.Errorf("len(Log()) = %d, want %d", got, want)
	}
	for _, db := range dbs {
		if err := db.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if got := d.Stats().OpenConns; got != 0 {
		t.Errorf("OpenConns after closing the pools = %d, want 0", got)
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := &fakedb.Driver{}
	db := d.DB()
	ctx, cancel := context.WithCancel(context.Background())
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("BeginTx: %v", err)
	}
	rows, err := tx.QueryContext(ctx, "Q")
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	_ = rows.Close()
	cancel()
	waitFor(t, "rollback", func() bool { return d.Stats().ActiveTx == 0 })
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// The rollback goroutine of database/sql may still hold the connection;
	// it closes the connection when it hands it back to the closed pool.
	waitFor(t, "connection close", func() bool { return d.Stats().OpenConns == 0 })
}
