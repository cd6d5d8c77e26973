package txretry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
)

// ErrAlreadyCommitted is matched (errors.Is) by the error RunInTx returns
// when the call's idempotency key (WithIdempotencyKey) is already
// committed by another call, earlier or concurrent, in this process or any
// other: fn's effects under the key are that call's, not this one's. The
// caller returns the result stored under the key. The error is this
// sentinel itself: it holds neither the key nor the server's message. A
// call whose own COMMIT was lost and then found committed returns nil, not
// this error.
var ErrAlreadyCommitted = errors.New("txretry: idempotency key already committed")

// maxPlainKey is the longest key stored as it is: the width of the column.
const maxPlainKey = 64

// WithIdempotencyKey makes the call's effects happen at most once per key,
// across its own retries, a client's retries and crashed processes whose
// requests are taken over: the key is made once, at the edge (the client
// or the request's entry point), before any retry, and sent with every
// repetition of the request.
//
// Every attempt inserts the key into table inside its transaction, before
// fn runs. The key commits with fn's effects or not at all, so:
//
//   - a key already committed (by any earlier call, in any process) makes
//     the insert fail with a duplicate key: the attempt is rolled back, fn
//     is not run, and RunInTx returns an error matching
//     ErrAlreadyCommitted;
//   - concurrent calls with one key queue on the key's row lock: the first
//     runs fn, the others wait for it to end and get ErrAlreadyCommitted if
//     it committed, or run fn themselves if it rolled back (a collision
//     reported as a serialization failure, as PostgreSQL may under
//     SERIALIZABLE, or the deadlock (1213) MySQL and MariaDB report among
//     waiting inserts when the first call rolls back, is retried like any
//     other and then finds the key; on MySQL and MariaDB the wait is
//     bounded by innodb_lock_wait_timeout);
//   - a lost COMMIT is resolved by the call's own row: with the key, every
//     attempt inserts a second row into table, the call's marker ('@'
//     followed by 32 random hexadecimal digits, made once per call, never
//     equal to a stored key), in the same INSERT statement. After a lost
//     COMMIT the marker is inserted again on a fresh connection and rolled
//     back, as WithCommitMarker does with its token: the probe waits while
//     the lost transaction still holds the marker's row lock. A duplicate
//     means this call committed: RunInTx returns nil, as after any commit.
//     Otherwise this call did not commit and is retried like any retry;
//     the retry finds the key if another call with the same key committed
//     meanwhile (ErrAlreadyCommitted), or runs fn. Like WithCommitMarker,
//     the probe needs a pool: on a single connection (*sql.Conn,
//     *pgx.Conn) a lost COMMIT is reported as ErrCommitUncertain.
//
// The pattern end to end: fn stores the request's result (a receipt, the
// new row's id) in the database, under the same key, in its own table;
// on nil the caller returns what fn computed, on ErrAlreadyCommitted it
// loads and returns the stored result, which also answers a client whose
// earlier call's reply was lost. The key covers effects in the database
// only: an e-mail sent, a message published or a remote API called from
// fn can happen more than once (use an outbox table written in fn).
//
// table has the commit marker's shape (create it with IdempotencyKeysDDL),
// holds two rows per committed call (its key and its marker) and should be
// used for keys only. Keys of at most 64 bytes made only of lower-case
// ASCII letters, digits, '-', '_', '.' and ':' are stored as they are;
// any other key (longer, upper-case, other characters) is stored as '~'
// followed by the first 63 hexadecimal digits of its SHA-256, which never
// equals a key stored as it is (see IdempotencyKeyToken). Upper-case
// keys are hashed because MySQL's and MariaDB's default collations compare
// case-insensitively. Keep keys longer than a client can retry or a
// crashed request be taken over, typically days; delete older ones with
// the statement from PurgeIdempotencyKeysSQL. A key purged is forgotten:
// a request repeated after that runs again.
//
// The key is user data: it appears, like the marker, in no error, event or
// log of txretry's (both are in the INSERT statement's text, where
// statement logging on the server would show them; the table's name is
// shown). table is an identifier, optionally qualified by a schema; an
// empty key or a bad table name makes the call return ErrInvalidOption, and
// so does combining the key with another verifier (WithCommitMarker,
// WithXactStatusVerification, WithVerify: the key verifies lost commits
// itself), with WithReadOnly (the key is a write), with a second
// WithIdempotencyKey, or using it in a call nested in another call's
// transaction on the same handle (which would commit the key with the outer
// transaction: give the key to the outermost call). Default: no key.
func WithIdempotencyKey(table, key string) Option {
	return func(c *config) {
		if err := validIdentifier(table); err != nil {
			c.fail("WithIdempotencyKey(%q, key): %v", table, err)
			return
		}
		if key == "" {
			c.fail("WithIdempotencyKey(%q, key): empty key", table)
			return
		}
		if c.idem != nil {
			c.fail("WithIdempotencyKey given twice: one key per call")
			return
		}
		if c.verifier != nil { // a verifier given after the key is caught by resolve
			c.fail("WithIdempotencyKey with another verifier (%s): the key verifies lost commits itself", c.verifier.name())
			return
		}
		// Options are applied once per call: the marker is the call's.
		k := &idemKey{table: table, token: IdempotencyKeyToken(key), marker: newMarker()}
		c.idem, c.verifier = k, k
	}
}

// IdempotencyKeyToken returns the form in which WithIdempotencyKey stores
// key in its table, for operators who look a key up or delete it by hand:
// the key itself when it has at most 64 bytes, all lower-case ASCII
// letters, digits, '-', '_', '.' or ':'; otherwise '~' followed by the
// first 63 lower-case hexadecimal digits of the SHA-256 of key's bytes.
// The table's other rows, whose token starts with '@', are the calls'
// markers (see WithIdempotencyKey); the purge deletes them with the keys.
func IdempotencyKeyToken(key string) string {
	if plainKey(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "~" + hex.EncodeToString(sum[:])[:maxPlainKey-1]
}

func plainKey(key string) bool {
	if key == "" || len(key) > maxPlainKey {
		return false
	}
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}

// IdempotencyKeysDDL returns the statement that creates the key table of
// WithIdempotencyKey if it does not exist: the commit marker's table (see
// CommitMarkerDDL), for PostgreSQL, MySQL and MariaDB alike. Tables made
// by earlier versions have the same shape and need no change.
func IdempotencyKeysDDL(table string) (string, error) { return CommitMarkerDDL(table) }

// PurgeIdempotencyKeysSQL returns the statement that deletes keys older
// than olderThan (whole seconds), for PostgreSQL, MySQL and MariaDB alike.
// A purged key is forgotten, so keep olderThan above the longest time a
// request can be repeated after it first arrived (client retries, queues
// redelivering, replicas taking over), typically days.
func PurgeIdempotencyKeysSQL(table string, olderThan time.Duration) (string, error) {
	return PurgeCommitMarkersSQL(table, olderThan)
}

// idemKey is a call's idempotency key, stored as token, and its verifier.
// marker is the call's own row beside the key: '@' and 32 random
// hexadecimal digits, which no key's token can equal (see
// IdempotencyKeyToken). It is committed with the key only by this call, so
// the probe after a lost COMMIT tells this call's commit from another's.
type idemKey struct {
	table  string
	token  string
	marker string
}

func newMarker() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "@" + hex.EncodeToString(b[:])
}

func (*idemKey) name() string { return "idempotency-key" }

// prepare has nothing to write: the key and the marker were inserted
// before fn.
func (k *idemKey) prepare(context.Context, Tx) (string, error) { return k.marker, nil }

// verify probes the call's marker: committed means this call committed.
// The probe's INSERT is a unique check, not a snapshot read: it waits for
// a transaction still holding the marker and sees its commit under any
// isolation level (a serialization failure instead is retried by the
// verify loop, never taken for "not committed").
func (k *idemKey) verify(ctx context.Context, begin beginFunc, marker string) (bool, error) {
	return markerVerifier{table: k.table}.verify(ctx, begin, marker)
}

// claim inserts the key and the call's marker in the attempt's
// transaction, in one statement. already reports a duplicate: the key is
// committed (the marker never is while the call goes on).
func (k *idemKey) claim(ctx context.Context, tx Tx) (already bool, err error) {
	err = tx.Exec(ctx, "INSERT INTO "+k.table+" (token) VALUES ('"+k.token+"'), ('"+k.marker+"')")
	if err != nil && (pgerr.Has(err, pgerr.UniqueViolation) || mysqlerr.Has(err, mysqlerr.DupEntry)) {
		return true, nil
	}
	return false, err
}

// checkIdempotency rejects what the key cannot combine with, before any
// attempt; nested reports a call that would join an enclosing transaction.
func checkIdempotency(cfg *config, nested bool) error {
	if cfg.idem == nil {
		return nil
	}
	if nested {
		return fmt.Errorf("%w: WithIdempotencyKey in a call nested in another's transaction on the same handle: give the key to the outermost call", ErrInvalidOption)
	}
	return nil
}
