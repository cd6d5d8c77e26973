package txretry

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
)

// WithRetryOnConnectionLoss makes the call also re-run the whole
// transaction when the database could not be reached or the connection
// broke before COMMIT was sent, so that a call rides out a server restart,
// a failover or a pooler's reload within its deadline. Such an attempt has
// not committed: its server session ended without a COMMIT, and the server
// rolls back a transaction whose session ends. Retried, with the option:
//
//   - BEGIN, fn or a statement failed with driver.ErrBadConn, an error for
//     which pgconn's SafeToRetry is true, a network error (refused, reset,
//     broken pipe, EOF, a timeout that was not the caller's), pgconn's
//     ErrConnClosed, lib/pq's "unexpected message 'E'" (the server's
//     last words before it closed the session, read where a reply was
//     due), go-sql-driver's ErrInvalidConn, PostgreSQL's class 08 (connection exception) or 57P01,
//     57P02, 57P03 (shutting down, starting up), or MySQL/MariaDB's 1053
//     (server shutdown), 1927 (connection killed) and 4031 (session closed
//     after wait_timeout);
//   - COMMIT failed with an error that proves nothing was sent or done
//     (SafeToRetry; driver.ErrBadConn only from go-sql-driver/mysql and
//     pgx's stdlib, never lib/pq's or an unknown driver's; MySQL's 4031,
//     sent before the server read COMMIT), the same proof that makes any
//     COMMIT error "not committed" (see the package documentation).
//
// Never retried: a connection lost while COMMIT was in flight. That commit
// is uncertain, with or without this option: it goes to the verifier
// (WithCommitMarker, WithXactStatusVerification, WithIdempotencyKey,
// WithVerify), whose own connection errors are retried within
// WithVerifyTimeout, or the call returns ErrCommitUncertain. Nor is an
// error after the caller's context ended: the call returns as it would
// without the option.
//
// These retries wait their own backoff, full jitter over 50 ms doubling to
// 1 s by the number of connection losses in a row (so that a call waiting
// out a restart of a second or two makes a handful of attempts), not the
// Backoff or the contention manager's spacing, since the server is away
// rather than busy; nor do they count as conflicts or commits for the
// manager. They count against WithMaxAttempts, WithTimeBudget, the
// context's deadline and WithRetryBudget like any retry; a call that runs
// out returns a *RetryError whose Err is the last connection error.
// Observers see their attempts with Class ConnectionLost.
//
// A handle of one connection (*sql.Conn, *pgx.Conn, an AdapterSingleConn)
// is not retried: its connection, once broken, does not come back, so the
// call returns the error at once, as without the option. A handle that can
// never connect (a wrong port, a server that stays down) is retried until
// one of those limits: give the call a deadline. fn must not act outside
// its transaction, as for any retry. Default: off.
func WithRetryOnConnectionLoss() Option {
	return func(c *config) { c.connLoss = true }
}

// connectionLost reports an error of a connection that broke or could
// not be made: one that WithRetryOnConnectionLoss retries outside COMMIT.
// An error caused by a context's end is not one.
func connectionLost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if safe, ok := safeToRetry(err); ok && safe {
		return true
	}
	if pgerr.SQLState(err) != "" {
		return pgerr.IsConnectionLoss(err)
	}
	if _, ok := mysqlerr.Number(err); ok {
		return mysqlerr.IsConnectionLoss(err)
	}
	var ne net.Error
	return errors.Is(err, driver.ErrBadConn) || mysqlerr.IsConnectionLoss(err) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		walk(err, isConnClosed) || walk(err, isPQDesync)
}

// isConnClosed reports pgconn's ErrConnClosed, by its text since drivers
// are not imported here: a leaf error "conn closed", which pgx returns for
// a connection that an earlier failure closed, as the pooled connections a
// restart killed are at their next BEGIN (pgconn does not call it safe to
// retry, since a request may have been sent; outside COMMIT that is safe).
func isConnClosed(err error) bool {
	return !isWrapper(err) && err.Error() == "conn closed"
}

// isPQDesync reports lib/pq's leaf error for an ErrorResponse where it
// awaited another message, by its text ("pq: unexpected message 'E';
// expected ReadyForQuery"): a server shutting down sends its FATAL 57P01
// and closes the session at any point of the protocol, and lib/pq returns
// that as a plain error without marking the connection bad. A restart
// failed a call of TestRestartPQ so. At COMMIT it stays uncertain, as
// every COMMIT error that proves nothing does.
func isPQDesync(err error) bool {
	return !isWrapper(err) && strings.HasPrefix(err.Error(), "pq: unexpected message 'E'")
}
