// Payment shows an idempotent payment with txretry.WithIdempotencyKey, and
// how the key resolves an uncertain commit.
//
// The idempotency key is generated BEFORE the retry loop, so that every
// attempt of the call, and every later call the client makes for the same
// payment (after a timeout, say), carries the same key. txretry inserts the
// key into its table in every attempt, before fn; fn debits the account and
// stores the receipt under the key in the same transaction. When the key is
// already committed, txretry returns txretry.ErrAlreadyCommitted without
// running fn, and the program returns the stored receipt: the account is
// debited once however often the call is made, and concurrent calls with one
// key wait for the first one.
//
// An uncertain commit (the connection is lost during COMMIT) is resolved
// beside the key: every attempt also inserts a marker of its call, which
// txretry inserts again on a fresh connection in a transaction it always
// rolls back. A duplicate means this call committed: the payment is made;
// success means it did not, and the payment is run again, which returns
// ErrAlreadyCommitted (and the stored receipt) if a concurrent call with
// the same key committed meanwhile. The tests simulate lost commits by wrapping the
// driver; the integration tests inject real ones through a proxy.
//
// Usage:
//
//	go run ./payment [-db all|postgres|mysql] [-amount 250] [-concurrent 8]
package main
