package txretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txretry/txretry/txretry/internal/fakedb"
)

// The database/sql adapter tells drivers apart by their types' packages,
// without importing them; a handle it cannot ask is an unknown driver.
// (lib/pq is not in the core's module graph: the integration module checks
// it, through a real server.)
func TestSQLDriverOfKnowsTheDriversByTheirPackage(t *testing.T) {
	cfg, err := pgx.ParseConfig("postgres://u@127.0.0.1:1/d")
	if err != nil {
		t.Fatal(err)
	}
	pgxDB := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { pgxDB.Close() })
	myDB, err := sql.Open("mysql", "u@tcp(127.0.0.1:1)/d")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { myDB.Close() })
	connector, err := mysql.NewConnector(mysql.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	myConnDB := sql.OpenDB(connector)
	t.Cleanup(func() { myConnDB.Close() })
	fake := (&fakedb.Driver{}).DB()
	t.Cleanup(func() { fake.Close() })
	fakeConn, err := fake.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fakeConn.Close() })
	closedConn, err := fake.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	closedConn.Close()

	for _, tc := range []struct {
		name string
		db   DB
		want sqlDriver
	}{
		{"pgx stdlib", pgxDB, sqlDriverPgxStdlib},
		{"go-sql-driver/mysql by name", myDB, sqlDriverMySQL},
		{"go-sql-driver/mysql connector", myConnDB, sqlDriverMySQL},
		{"another driver", fake, sqlDriverOther},
		{"another driver's *sql.Conn", fakeConn, sqlDriverOther},
		{"a closed *sql.Conn", closedConn, sqlDriverOther},
		{"a zero *sql.DB", &sql.DB{}, sqlDriverOther},
		{"neither *sql.DB nor *sql.Conn", fakeBeginner{}, sqlDriverOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sqlDriverOf(tc.db); got != tc.want {
				t.Fatalf("sqlDriverOf = %d, want %d", got, tc.want)
			}
		})
	}
}

type fakeBeginner struct{}

func (fakeBeginner) BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error) {
	return nil, errors.New("no")
}

// commitErrTx is a SQLTransaction whose Commit fails with err.
type commitErrTx struct {
	SQLTransaction
	err error
}

func (c commitErrTx) Commit() error { return c.err }

// SQLTx.Commit marks as not committed what the driver's source proves, and
// nothing else: driver.ErrBadConn proves it for go-sql-driver/mysql and
// pgx's stdlib only; lib/pq's failed-transaction error for lib/pq only.
func TestSQLTxCommitMarksWhatTheDriverProves(t *testing.T) {
	badConn := fmt.Errorf("commit: %w", driver.ErrBadConn)
	failedTx := errors.New(pqInFailedTransactionMsg)
	for _, tc := range []struct {
		name   string
		driver sqlDriver
		err    error
		want   bool
	}{
		{"mysql ErrBadConn", sqlDriverMySQL, badConn, true},
		{"pgx stdlib ErrBadConn", sqlDriverPgxStdlib, driver.ErrBadConn, true},
		{"lib/pq ErrBadConn", sqlDriverPQ, driver.ErrBadConn, false},
		{"unknown driver ErrBadConn", sqlDriverOther, driver.ErrBadConn, false},
		{"lib/pq failed transaction", sqlDriverPQ, failedTx, true},
		{"lib/pq failed transaction, wrapped", sqlDriverPQ, fmt.Errorf("x: %w", failedTx), true},
		{"failed-transaction text from another driver", sqlDriverOther, failedTx, false},
		{"mysql EOF", sqlDriverMySQL, io.ErrUnexpectedEOF, false},
		{"lib/pq EOF", sqlDriverPQ, io.EOF, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx := &SQLTx[commitErrTx]{Tx: commitErrTx{err: tc.err}, cancel: func() {}, driver: tc.driver}
			err := tx.Commit(context.Background(), time.Second)
			if got := errors.Is(err, ErrNotCommitted); got != tc.want || !errors.Is(err, tc.err) {
				t.Fatalf("Commit = %v: not committed %v, want %v, carrying %v", err, got, tc.want, tc.err)
			}
			if got := notCommitted(err); got != tc.want {
				t.Fatalf("the engine takes %v as not committed: %v, want %v", err, got, tc.want)
			}
		})
	}
}
