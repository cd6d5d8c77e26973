// Package faultproxy is an in-process TCP proxy for PostgreSQL and
// MySQL/MariaDB that breaks a connection exactly at COMMIT, or at any
// statement a test chooses.
//
// txretry must tell apart, after a connection is lost during COMMIT, whether
// the server committed. A client sees the same error whether the COMMIT
// reached the server or not (pgx reports a closed connection or an
// unexpected EOF, go-sql-driver/mysql reports an invalid connection), so the
// integration tests need a way to lose the connection on either side of the
// commit point. The proxy understands just enough of each wire protocol to
// recognise a COMMIT and to find the end of the server's reply to it:
//
//   - [DropBeforeCommit] closes both sides without forwarding the COMMIT, so
//     the server rolls back;
//   - [DropAfterCommit] forwards the COMMIT, reads the server's complete
//     reply and closes both sides without passing it on, so the server
//     committed but the client cannot know;
//   - [DropMidReply] forwards the COMMIT and only part of the reply (on
//     PostgreSQL all of it but the final ReadyForQuery), so the server
//     committed and the client may have seen the command tag;
//   - [StallReply] forwards the COMMIT and holds the reply until
//     [Proxy.Release] or [Proxy.Close], so the client times out.
//
// A fault is armed with [Proxy.Arm] for the next COMMIT on any connection, or
// chosen per COMMIT by a policy set with [Proxy.SetPolicy] (for randomized
// campaigns).
//
// The same faults apply to any other statement through a [Trigger], armed
// with [Proxy.ArmAt]: it picks the Nth request (a statement run or
// prepared) whose text it matches, counted on all connections from the
// moment it is armed, so that a test whose calls run one at a time can
// break BEGIN, a statement of the transaction, a verifier's query, or a
// statement on another connection of the pool, before the server gets it,
// after the server answered it or in the middle of the answer.
// [Proxy.Disarm] removes what has not fired.
//
// pgx, on closing a broken connection, sends a PostgreSQL CancelRequest over a
// new connection, which can abort a COMMIT still running on the server. A real
// network partition would stop that request too, so
// [Proxy.BlockCancelRequests] makes the proxy swallow cancel requests.
//
// # What is recognised as COMMIT
//
// The statement text, case-insensitively, with surrounding white space and
// trailing semicolons removed and inner white space collapsed, must be one of
// "commit", "commit work", "commit transaction" or (PostgreSQL only) "end",
// "end work", "end transaction". Comments and multi-statement strings are not
// recognised.
//
// PostgreSQL: a simple Query message with that text, or an Execute message of
// a portal bound (Bind) to a statement whose Parse text is that text; named
// and unnamed statements and portals are tracked per connection. The proxy
// answers SSLRequest and GSSENCRequest with 'N' itself (connections through
// it are never encrypted). Messages are forwarded as they arrive; the fault is
// decided when the executing message (Query or Execute) is seen, and the
// reply to the COMMIT is found by counting ReadyForQuery messages (one per
// startup, Query, Sync and FunctionCall). An Execute of COMMIT must therefore
// be followed by Sync, as pgx, libpq and JDBC do; a client that sends Flush
// and waits would not get its reply under DropAfterCommit. Sync messages that
// the server ignores (during COPY FROM STDIN started through the extended
// protocol) would upset the count.
//
// MySQL/MariaDB: in the command phase (after the server's OK that ends
// authentication), a client packet with sequence id 0 holding COM_QUERY with
// that text; the reply is the server's next packet (OK or ERR). Connections
// that negotiate TLS or compression are passed through without recognising
// COMMIT or any other request.
//
// # Requests, for triggers
//
// PostgreSQL: Query, Parse and Execute messages, as above; a Parse is a
// request of its own (the round trip that prepares a statement) but never a
// COMMIT. MySQL/MariaDB: COM_QUERY, COM_STMT_PREPARE and COM_STMT_EXECUTE
// packets of up to 1 MiB; the proxy learns a prepared statement's id from
// the server's reply to COM_STMT_PREPARE. A MySQL reply is taken to start
// with the server's first packet after a command that has one (every
// command but COM_STMT_CLOSE, COM_STMT_SEND_LONG_DATA and COM_QUIT), which
// holds for clients that read each reply whole before the next command,
// as go-sql-driver does. On MySQL, DropAfterCommit closes once the reply's
// first packet has come (the server has run the command by then; for OK
// and ERR it is the whole reply), and DropMidReply passes on that packet
// without its last byte.
//
// The proxy uses the standard library only and listens on 127.0.0.1 only.
package faultproxy
