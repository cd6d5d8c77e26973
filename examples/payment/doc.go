// Payment shows an idempotent payment with txretry, and how an uncertain
// commit is resolved by verification.
//
// The idempotency key is generated BEFORE the retry loop, so that every
// attempt of the call, and every later call the client makes for the same
// payment (after a timeout, say), carries the same key. The transaction
// inserts the payment row under that key (a primary key) and debits the
// account. A unique violation on the key means the payment was already made:
// the program then returns the earlier receipt instead of failing, and the
// account is debited once however often the call is made.
//
// An uncertain commit (the connection is lost during COMMIT) is resolved by
// txretry.WithVerify with a callback that probes the key on a fresh
// connection: it inserts the key in a transaction it always rolls back. A
// duplicate means the lost transaction committed; success means it did not.
// A plain SELECT would not do: on PostgreSQL a row the lost transaction
// inserted but has not committed is invisible to other sessions, even to
// SELECT ... FOR SHARE, so a read could say "not paid" for a transaction that
// commits a moment later; the probe INSERT instead waits for the lost
// transaction to end. With -verify builtin the program uses txretry's own
// verifiers instead: WithXactStatusVerification on PostgreSQL,
// WithCommitMarker on MySQL and MariaDB.
//
// A lost COMMIT cannot be caused honestly without a proxy between the
// program and the server, so the program calls the verification callback
// directly: for the key of a completed payment (committed=true) and for a key
// never written (committed=false). The integration tests inject real lost
// commits through a fault-injecting proxy.
//
// Usage:
//
//	go run ./payment [-db all|postgres|mysql] [-verify key|builtin] [-amount 250] [-concurrent 8]
package main
