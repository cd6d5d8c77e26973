package mysqlerr

import (
	"errors"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Server error numbers used by this package and by the transaction engine.
// See the package documentation for the table of classes and sources.
const (
	// LockDeadlock (1213, ER_LOCK_DEADLOCK, SQLSTATE 40001): "Deadlock found
	// when trying to get lock; try restarting transaction". InnoDB rolled
	// back the whole transaction. Galera certification failures and TiDB
	// pessimistic-mode deadlocks use it too. Retried by default. Source:
	// MySQL Server Error Message Reference; MySQL "InnoDB Error Handling";
	// Galera documentation.
	LockDeadlock uint16 = 1213

	// LockWaitTimeout (1205, ER_LOCK_WAIT_TIMEOUT): "Lock wait timeout
	// exceeded; try restarting transaction". Opt-in, see
	// [IsLockWaitTimeout]. Source: MySQL Server Error Message Reference;
	// MySQL "InnoDB Error Handling".
	LockWaitTimeout uint16 = 1205

	// DupEntry (1062, ER_DUP_ENTRY): "Duplicate entry … for key …". Not
	// classified. Source: MySQL Server Error Message Reference.
	DupEntry uint16 = 1062

	// ParseError (1064, ER_PARSE_ERROR): SQL syntax error. Not classified.
	// Source: MySQL Server Error Message Reference.
	ParseError uint16 = 1064

	// CheckRead (1020, ER_CHECKREAD): "Record has changed since last read in
	// table …". MariaDB with innodb_snapshot_isolation=ON reports write-write
	// conflicts under REPEATABLE READ with it. Opt-in, see
	// [IsSnapshotConflict]. Source: MariaDB error codes;
	// innodb_snapshot_isolation documentation.
	CheckRead uint16 = 1020

	// UnknownComError (1047, ER_UNKNOWN_COM_ERROR): with Galera, "WSREP has
	// not yet prepared node for application use" (the node is not ready to
	// serve queries). Not classified. Source: MySQL Server Error Message
	// Reference; Galera documentation.
	UnknownComError uint16 = 1047

	// ErrorDuringCommit (1180, ER_ERROR_DURING_COMMIT): "Got error %d during
	// COMMIT". Not classified. Source: MySQL Server Error Message Reference;
	// MariaDB error codes.
	ErrorDuringCommit uint16 = 1180

	// GroupReplicationRollback (3101, ER_TRANSACTION_ROLLBACK_DURING_COMMIT):
	// "Plugin instructed the server to rollback the current transaction". In
	// MySQL Group Replication the transaction failed certification and was
	// rolled back. Opt-in, see [IsGroupReplicationConflict]. Source: MySQL
	// Server Error Message Reference; MySQL "Group Replication".
	GroupReplicationRollback uint16 = 3101

	// TiDBWriteConflict (9007, TiDB ErrWriteConflict): "Write conflict",
	// detected by TiKV. Opt-in, see [IsTiDBRetryable]. Source: TiDB "Error
	// Codes and Troubleshooting".
	TiDBWriteConflict uint16 = 9007

	// TiDBForUpdateCantRetry (8002, TiDB ErrForUpdateCantRetry): a
	// transaction with SELECT … FOR UPDATE hit a commit conflict and was
	// rolled back; the whole transaction can safely be retried. Opt-in, see
	// [IsTiDBRetryable]. Source: TiDB "Error Codes and Troubleshooting".
	TiDBForUpdateCantRetry uint16 = 8002

	// TiDBWriteConflictInTiDB (8005, TiDB ErrWriteConflictInTiDB): "Write
	// Conflict, txnStartTS is stale", a write conflict detected by TiDB.
	// Opt-in, see [IsTiDBRetryable]. Source: TiDB "Error Codes and
	// Troubleshooting".
	TiDBWriteConflictInTiDB uint16 = 8005

	// TiDBTxnRetryable (8022, TiDB ErrTxnRetryable): the commit failed and
	// the transaction was rolled back; it can safely be retried. Opt-in, see
	// [IsTiDBRetryable]. Source: TiDB "Error Codes and Troubleshooting".
	TiDBTxnRetryable uint16 = 8022

	// TiDBInfoSchemaChanged (8028, TiDB ErrInfoSchemaChanged): a table
	// schema changed while the transaction ran; the whole transaction can be
	// retried. Opt-in, see [IsTiDBRetryable]. Source: TiDB "Error Codes and
	// Troubleshooting".
	TiDBInfoSchemaChanged uint16 = 8028

	// ServerShutdown (1053, ER_SERVER_SHUTDOWN): "Server shutdown in
	// progress". Opt-in, see [IsConnectionLoss]. Source: MySQL Server Error
	// Message Reference.
	ServerShutdown uint16 = 1053

	// ConnectionKilled (1927, ER_CONNECTION_KILLED, MariaDB): "Connection was
	// killed". MariaDB 10.11.19 sent no error packet when KILL CONNECTION or
	// SHUTDOWN ended a session (the driver saw the connection close), so
	// this number is documentation only. Opt-in, see [IsConnectionLoss].
	// Source: MariaDB error codes.
	ConnectionKilled uint16 = 1927

	// ClientInteractionTimeout (4031, ER_CLIENT_INTERACTION_TIMEOUT, MySQL
	// 8.0.24 and later): "The client was disconnected by the server because
	// of inactivity", sent before MySQL closes a session idle past
	// wait_timeout; the session's transaction was rolled back. Opt-in, see
	// [IsConnectionLoss]. Source: MySQL Server Error Message Reference.
	ClientInteractionTimeout uint16 = 4031

	// QueryInterrupted (1317, ER_QUERY_INTERRUPTED, SQLSTATE 70100): "Query
	// execution was interrupted", the answer to KILL QUERY. Not classified.
	// Source: MySQL Server Error Message Reference.
	QueryInterrupted uint16 = 1317

	// LockNowait (3572, ER_LOCK_NOWAIT, MySQL): "Statement aborted because
	// lock(s) could not be acquired immediately and NOWAIT is set". Not
	// classified. Source: MySQL Server Error Message Reference.
	LockNowait uint16 = 3572

	// OptionPreventsStatement (1290, ER_OPTION_PREVENTS_STATEMENT): a server
	// running with read_only or super_read_only refused a write. Not
	// classified. Source: MySQL Server Error Message Reference.
	OptionPreventsStatement uint16 = 1290

	// ReadOnlyTransaction (1792, ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION,
	// SQLSTATE 25006): a write in a READ ONLY transaction. Not classified.
	// Source: MySQL Server Error Message Reference.
	ReadOnlyTransaction uint16 = 1792
)

// Number returns the error number of the first *mysql.MySQLError in err's
// tree, walking depth-first in Unwrap order, and true. It returns 0 and false
// if err is nil or the tree holds no *mysql.MySQLError.
func Number(err error) (uint16, bool) {
	var (
		first uint16
		found bool
	)
	walk(err, func(me *mysql.MySQLError) bool {
		first, found = me.Number, true
		return true
	})
	return first, found
}

// Has reports whether any *mysql.MySQLError in err's tree has one of
// numbers. It returns false if err is nil or numbers is empty.
func Has(err error, numbers ...uint16) bool {
	if len(numbers) == 0 {
		return false
	}
	return walk(err, func(me *mysql.MySQLError) bool {
		return slices.Contains(numbers, me.Number)
	})
}

// IsDeadlock reports whether err's tree holds ER_LOCK_DEADLOCK (1213).
func IsDeadlock(err error) bool {
	return Has(err, LockDeadlock)
}

// IsRetryable is the default retry class: it reports whether err's tree
// holds ER_LOCK_DEADLOCK (1213). InnoDB has rolled back the whole
// transaction, and running it again may succeed. Galera certification
// failures and TiDB pessimistic-mode deadlocks are reported with 1213 too.
func IsRetryable(err error) bool {
	return Has(err, LockDeadlock)
}

// IsConnectionLoss is an opt-in class: it reports whether err's tree holds
// go-sql-driver's ErrInvalidConn (the connection broke under a command),
// ER_SERVER_SHUTDOWN (1053), ER_CONNECTION_KILLED (1927, MariaDB) or
// ER_CLIENT_INTERACTION_TIMEOUT (4031, MySQL): the session ended, and with
// it any transaction it had not committed. Retrying is safe only for errors
// outside COMMIT: a connection lost during COMMIT may follow a commit that
// was applied (txretry.WithRetryOnConnectionLoss draws that line).
//
// MariaDB uses 4031 for ER_REFERENCED_TRG_DOES_NOT_EXIST ("Referenced
// trigger '…' for the given action time and event type does not exist",
// from CREATE TRIGGER … FOLLOWS or PRECEDES), with the same SQLSTATE HY000;
// a 4031 whose message starts with "Referenced trigger" is not a lost
// connection.
func IsConnectionLoss(err error) bool {
	return errors.Is(err, mysql.ErrInvalidConn) || walk(err, func(me *mysql.MySQLError) bool {
		switch me.Number {
		case ServerShutdown, ConnectionKilled:
			return true
		case ClientInteractionTimeout:
			return !strings.HasPrefix(me.Message, mariaDBTriggerMissing)
		}
		return false
	})
}

// mariaDBTriggerMissing begins the message of MariaDB's error 4031,
// ER_REFERENCED_TRG_DOES_NOT_EXIST, which shares MySQL's number for
// ER_CLIENT_INTERACTION_TIMEOUT.
const mariaDBTriggerMissing = "Referenced trigger"

// IsLockWaitTimeout is an opt-in class: it reports whether err's tree holds
// ER_LOCK_WAIT_TIMEOUT (1205).
//
// InnoDB rolls back only the statement that timed out, not the transaction,
// unless the server runs with innodb_rollback_on_timeout=ON; the rest of the
// transaction stays open and still holds its locks. Retrying such an error
// is safe with txretry only because txretry always rolls back the whole
// transaction before it retries, so no half-done work is ever committed.
func IsLockWaitTimeout(err error) bool {
	return Has(err, LockWaitTimeout)
}

// IsSnapshotConflict is an opt-in class: it reports whether err's tree holds
// ER_CHECKREAD (1020, "Record has changed since last read"), which MariaDB
// with innodb_snapshot_isolation=ON reports when a REPEATABLE READ
// transaction tries to lock or change a row that another transaction
// changed after this one's snapshot was taken.
func IsSnapshotConflict(err error) bool {
	return Has(err, CheckRead)
}

// IsGroupReplicationConflict is an opt-in class: it reports whether err's
// tree holds ER_TRANSACTION_ROLLBACK_DURING_COMMIT (3101), which MySQL Group
// Replication returns at COMMIT when the transaction failed certification
// (a conflicting transaction from another member was ordered first) and was
// rolled back.
func IsGroupReplicationConflict(err error) bool {
	return Has(err, GroupReplicationRollback)
}

// IsTiDBRetryable is an opt-in class: it reports whether err's tree holds one
// of the TiDB numbers for which TiDB's documentation says the transaction
// can be retried: 9007 (write conflict), 8002 (SELECT … FOR UPDATE commit
// conflict), 8005 (write conflict, txnStartTS is stale), 8022 (commit failed
// and rolled back) or 8028 (table schema changed).
func IsTiDBRetryable(err error) bool {
	return Has(err, TiDBWriteConflict, TiDBForUpdateCantRetry,
		TiDBWriteConflictInTiDB, TiDBTxnRetryable, TiDBInfoSchemaChanged)
}

// walk calls visit with every *mysql.MySQLError in err's tree, depth-first
// in Unwrap order, until visit returns true. It reports whether visit
// returned true.
func walk(err error, visit func(me *mysql.MySQLError) bool) bool {
	for err != nil {
		if me := nodeMySQLError(err); me != nil && visit(me) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walk(e, visit) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// nodeMySQLError returns err itself if it is a non-nil *mysql.MySQLError, or
// else what its As(any) bool method offers, as errors.As would ask a single
// error. It returns nil if there is none.
func nodeMySQLError(err error) *mysql.MySQLError {
	if me, ok := err.(*mysql.MySQLError); ok {
		return me // nil for a typed nil pointer, which has no number.
	}
	if a, ok := err.(interface{ As(any) bool }); ok {
		var me *mysql.MySQLError
		if a.As(&me) {
			return me
		}
	}
	return nil
}
