package mysqlerr_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/txretry/txretry/mysqlerr"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func myErr(n uint16) error {
	return &mysql.MySQLError{Number: n, SQLState: [5]byte{'H', 'Y', '0', '0', '0'}, Message: "test"}
}

var deadlock = &mysql.MySQLError{
	Number:   1213,
	SQLState: [5]byte{'4', '0', '0', '0', '1'},
	Message:  "Deadlock found when trying to get lock; try restarting transaction",
}

// asErr has no number of its own but converts itself with As, as some error
// libraries do.
type asErr struct{ number uint16 }

func (e *asErr) Error() string { return "as error" }

func (e *asErr) As(target any) bool {
	t, ok := target.(**mysql.MySQLError)
	if ok {
		*t = &mysql.MySQLError{Number: e.number}
	}
	return ok
}

// multiErr wraps several errors with Unwrap() []error, without errors.Join.
type multiErr []error

func (m multiErr) Error() string   { return "multi" }
func (m multiErr) Unwrap() []error { return m }

// numberedErr is a custom error type that merely looks like a server error;
// it is not a *mysql.MySQLError and has no number.
type numberedErr struct{ Number uint16 }

func (e numberedErr) Error() string { return "Error " + strconv.Itoa(int(e.Number)) }

func TestNumber(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		want   uint16
		wantOK bool
	}{
		{"nil", nil, 0, false},
		{"plain error", errors.New("Error 1213: deadlock"), 0, false},
		{"custom type without driver error", numberedErr{1213}, 0, false},
		{"driver error", deadlock, 1213, true},
		{"number zero", &mysql.MySQLError{}, 0, true},
		{"wrapped", fmt.Errorf("commit: %w", deadlock), 1213, true},
		{"double wrapped", fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", myErr(1205))), 1205, true},
		{"join first wins", errors.Join(myErr(1146), deadlock), 1146, true},
		{"join code second", errors.Join(errors.New("rollback: bad connection"), deadlock), 1213, true},
		{"multiple %w", fmt.Errorf("a: %w, b: %w", errors.New("a"), myErr(1020)), 1020, true},
		{"custom Unwrap []error", multiErr{numberedErr{1}, myErr(3101)}, 3101, true},
		{"As method", fmt.Errorf("lib: %w", &asErr{9007}), 9007, true},
		{"typed nil", fmt.Errorf("x: %w", (*mysql.MySQLError)(nil)), 0, false},
		{"typed nil then code", errors.Join((*mysql.MySQLError)(nil), deadlock), 1213, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := mysqlerr.Number(tt.err)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Number() = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestHas(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		numbers []uint16
		want    bool
	}{
		{"nil", nil, []uint16{1213}, false},
		{"no numbers", deadlock, nil, false},
		{"plain", errors.New("1213"), []uint16{1213}, false},
		{"match", deadlock, []uint16{1213}, true},
		{"match second number", myErr(1205), []uint16{1213, 1205}, true},
		{"no match", myErr(1146), []uint16{1213, 1205}, false},
		{"join code second", errors.Join(myErr(1146), deadlock), []uint16{1213}, true},
		{"double wrapped join", fmt.Errorf("a: %w", fmt.Errorf("b: %w", errors.Join(myErr(1062), myErr(8022)))), []uint16{8022}, true},
		{"deep custom tree", multiErr{multiErr{errors.New("x")}, fmt.Errorf("y: %w", myErr(1020))}, []uint16{1020}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mysqlerr.Has(tt.err, tt.numbers...); got != tt.want {
				t.Errorf("Has(%v) = %v, want %v", tt.numbers, got, tt.want)
			}
		})
	}
}

// TestClasses checks each classifier against each number. Every number is
// wrapped, then joined after an unrelated server error, so that the
// classifiers must walk the whole tree.
func TestClasses(t *testing.T) {
	classes := map[string]func(error) bool{
		"IsRetryable":                mysqlerr.IsRetryable,
		"IsDeadlock":                 mysqlerr.IsDeadlock,
		"IsLockWaitTimeout":          mysqlerr.IsLockWaitTimeout,
		"IsSnapshotConflict":         mysqlerr.IsSnapshotConflict,
		"IsGroupReplicationConflict": mysqlerr.IsGroupReplicationConflict,
		"IsTiDBRetryable":            mysqlerr.IsTiDBRetryable,
		"IsConnectionLoss":           mysqlerr.IsConnectionLoss,
	}
	// want lists, for each number, the classes that accept it.
	want := map[uint16][]string{
		mysqlerr.LockDeadlock:             {"IsRetryable", "IsDeadlock"},
		mysqlerr.LockWaitTimeout:          {"IsLockWaitTimeout"},
		mysqlerr.CheckRead:                {"IsSnapshotConflict"},
		mysqlerr.GroupReplicationRollback: {"IsGroupReplicationConflict"},
		mysqlerr.TiDBWriteConflict:        {"IsTiDBRetryable"},
		mysqlerr.TiDBForUpdateCantRetry:   {"IsTiDBRetryable"},
		mysqlerr.TiDBWriteConflictInTiDB:  {"IsTiDBRetryable"},
		mysqlerr.TiDBTxnRetryable:         {"IsTiDBRetryable"},
		mysqlerr.TiDBInfoSchemaChanged:    {"IsTiDBRetryable"},
		mysqlerr.DupEntry:                 nil,
		mysqlerr.ParseError:               nil,
		mysqlerr.UnknownComError:          nil,
		mysqlerr.ErrorDuringCommit:        nil,
		mysqlerr.ServerShutdown:           {"IsConnectionLoss"},
		mysqlerr.ConnectionKilled:         {"IsConnectionLoss"},
		mysqlerr.ClientInteractionTimeout: {"IsConnectionLoss"},
		mysqlerr.QueryInterrupted:         nil,
		mysqlerr.LockNowait:               nil,
		mysqlerr.OptionPreventsStatement:  nil,
		mysqlerr.ReadOnlyTransaction:      nil,
		1146:                              nil, // ER_NO_SUCH_TABLE
		0:                                 nil,
	}
	for number, accepted := range want {
		for name, is := range classes {
			expect := slices.Contains(accepted, name)
			errs := map[string]error{
				"driver":         myErr(number),
				"joined second":  errors.Join(myErr(1146), fmt.Errorf("commit: %w", myErr(number))),
				"double wrapped": fmt.Errorf("a: %w", fmt.Errorf("b: %w", myErr(number))),
			}
			for shape, err := range errs {
				t.Run(fmt.Sprintf("%s/%d/%s", name, number, shape), func(t *testing.T) {
					if got := is(err); got != expect {
						t.Errorf("%s(%v) = %v, want %v", name, err, got, expect)
					}
				})
			}
		}
	}
	for name, is := range classes {
		for shape, err := range map[string]error{
			"nil":         nil,
			"plain":       errors.New("Error 1213: deadlock"),
			"custom type": numberedErr{1213},
			"typed nil":   fmt.Errorf("x: %w", (*mysql.MySQLError)(nil)),
		} {
			t.Run(name+"/"+shape, func(t *testing.T) {
				if is(err) {
					t.Errorf("%s(%v) = true, want false", name, err)
				}
			})
		}
	}
}

// TestConnectionLossDriverError: go-sql-driver's ErrInvalidConn, which has
// no number, is a lost connection wherever it sits in the tree.
func TestConnectionLossDriverError(t *testing.T) {
	for name, err := range map[string]error{
		"driver":        mysql.ErrInvalidConn,
		"wrapped":       fmt.Errorf("commit: %w", mysql.ErrInvalidConn),
		"joined second": errors.Join(myErr(1146), mysql.ErrInvalidConn),
	} {
		if !mysqlerr.IsConnectionLoss(err) {
			t.Errorf("IsConnectionLoss(%s %v) = false, want true", name, err)
		}
	}
}

// TestServerAnswers classifies the errors as MySQL 9.7.4 and MariaDB
// 10.11.19 sent them (number, SQLSTATE and message copied from the
// servers; integration/scenarios' TestMySQLServerAnswers provokes them).
func TestServerAnswers(t *testing.T) {
	const (
		none = iota
		retryable
		lockWait
		snapshot
		connLoss
	)
	for _, tc := range []struct {
		server, what string
		number       uint16
		sqlState     string
		message      string
		class        int
	}{
		{"both", "lock cycle", 1213, "40001", "Deadlock found when trying to get lock; try restarting transaction", retryable},
		{"both", "lock wait timeout", 1205, "HY000", "Lock wait timeout exceeded; try restarting transaction", lockWait},
		{"MariaDB", "FOR UPDATE NOWAIT", 1205, "HY000", "Lock wait timeout exceeded; try restarting transaction", lockWait},
		{"MySQL", "FOR UPDATE NOWAIT", 3572, "HY000", "Statement aborted because lock(s) could not be acquired immediately and NOWAIT is set.", none},
		{"MariaDB", "innodb_snapshot_isolation=ON conflict", 1020, "HY000", "Record has changed since last read in table 'answers'; try restarting transaction", snapshot},
		{"MySQL", "SELECT @@innodb_snapshot_isolation", 1193, "HY000", "Unknown system variable 'innodb_snapshot_isolation'", none},
		{"MySQL", "write in a READ ONLY transaction", 1792, "25006", "Cannot execute statement in a READ ONLY transaction.", none},
		{"MariaDB", "write in a READ ONLY transaction", 1792, "25006", "Cannot execute statement in a READ ONLY transaction", none},
		{"MySQL", "write with read_only ON, COMMIT too", 1290, "HY000", "The MySQL server is running with the --read-only option so it cannot execute this statement", none},
		{"MariaDB", "write with read_only ON, COMMIT too", 1290, "HY000", "The MariaDB server is running with the --read-only option so it cannot execute this statement", none},
		{"MySQL", "write with super_read_only ON", 1290, "HY000", "The MySQL server is running with the --super-read-only option so it cannot execute this statement", none},
		{"both", "KILL QUERY", 1317, "70100", "Query execution was interrupted", none},
		{"MySQL", "first command after wait_timeout", 4031, "HY000", "The client was disconnected by the server because of inactivity. See wait_timeout and interactive_timeout for configuring this behavior.", connLoss},
		{"MySQL", "statement waiting for a lock at SHUTDOWN", 1053, "08S01", "Server shutdown in progress", connLoss},
		{"MariaDB", "CREATE TRIGGER … FOLLOWS a missing trigger", 4031, "HY000", "Referenced trigger 'nosuch' for the given action time and event type does not exist", none},
	} {
		t.Run(tc.server+"/"+tc.what, func(t *testing.T) {
			err := fmt.Errorf("attempt: %w", &mysql.MySQLError{Number: tc.number, SQLState: [5]byte([]byte(tc.sqlState)), Message: tc.message})
			for _, c := range []struct {
				name  string
				got   bool
				class int
			}{
				{"IsRetryable", mysqlerr.IsRetryable(err), retryable},
				{"IsLockWaitTimeout", mysqlerr.IsLockWaitTimeout(err), lockWait},
				{"IsSnapshotConflict", mysqlerr.IsSnapshotConflict(err), snapshot},
				{"IsConnectionLoss", mysqlerr.IsConnectionLoss(err), connLoss},
			} {
				if c.got != (c.class == tc.class) {
					t.Errorf("%s(%v) = %v", c.name, err, c.got)
				}
			}
		})
	}
}
