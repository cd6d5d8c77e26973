package txretry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/txretry/txretry/mysqlerr"
	"github.com/txretry/txretry/pgerr"
)

// verifier establishes the outcome of an uncertain commit.
type verifier interface {
	name() string
	// prepare runs inside the transaction just before COMMIT and returns
	// what verify needs.
	prepare(ctx context.Context, tx Tx) (state string, err error)
	// verify makes one try at establishing the outcome. An error is retried
	// with backoff until the verification deadline, unless it matches
	// errUnresolvable.
	verify(ctx context.Context, begin beginFunc, state string) (committed bool, err error)
}

// beginFunc starts a fresh transaction for a verifier.
type beginFunc func(ctx context.Context, opts TxOptions) (Tx, error)

// probeTimeout bounds the rollback of a verifier's probe transaction.
const probeTimeout = 5 * time.Second

var (
	errUnresolvable = errors.New("txretry: the outcome cannot be established")
	errInProgress   = errors.New("txretry: the transaction is still in progress on the server")
)

// WithVerify sets a callback that establishes the outcome of an uncertain
// commit (see ErrCommitUncertain). It runs after such a commit, on a
// connection the callback obtains itself (the attempt's connection is
// broken), typically by looking for an effect of the transaction that is
// unique to it, such as an idempotency key written by fn.
//
//   - committed=true, err=nil: RunInTx returns nil.
//   - committed=false, err=nil: the transaction is re-run like any retry,
//     counting as an attempt and subject to the attempt limit.
//   - err != nil: the callback is called again after a backoff until it
//     answers or the verification timeout, time budget or caller's context
//     ends; RunInTx then returns an error matching ErrCommitUncertain that
//     also wraps the callback's last error. A panic in the callback is
//     reported as such an error.
//
// The callback must not report committed=false unless the transaction can
// no longer commit (for example, its row locks would block the lookup while
// it is still running). Default: no verifier.
func WithVerify(verify func(ctx context.Context) (committed bool, err error)) Option {
	return func(c *config) {
		if verify == nil {
			c.fail("WithVerify(nil)")
			return
		}
		c.verifier = callbackVerifier(verify)
	}
}

type callbackVerifier func(ctx context.Context) (bool, error)

func (callbackVerifier) name() string { return "callback" }

func (callbackVerifier) prepare(context.Context, Tx) (string, error) { return "", nil }

func (f callbackVerifier) verify(ctx context.Context, _ beginFunc, _ string) (committed bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			committed, err = false, fmt.Errorf("txretry: verify callback panicked: %v", p)
		}
	}()
	return f(ctx)
}

// WithXactStatusVerification verifies uncertain commits on PostgreSQL (13 or
// later) by transaction id, with either adapter and a pool handle (on a
// single connection, lost with the commit, it reports the commit uncertain
// at once): just before COMMIT it reads
// the transaction's id with pg_current_xact_id_if_assigned() (one round
// trip; no id is forced on a transaction that wrote nothing), and after an
// uncertain commit it asks pg_xact_status on a fresh connection, polling
// with the backoff while the answer is "in progress" (a COMMIT that never
// arrived is reported aborted only once the server has noticed the broken
// connection). "committed" makes the call succeed; "aborted" re-runs it; a
// NULL answer (the id is too old) is unresolved. A transaction that wrote
// nothing has no id and is simply re-run, which is harmless. Read-only
// transactions skip the query. The same query reads the server's system
// identifier and WAL timeline, and only a server with both unchanged is
// asked: a standby promoted by a failover has a new timeline, and its
// counter may give the lost transaction's id to another transaction, so
// there the commit is unresolved (ErrCommitUncertain); where failovers
// happen, WithCommitMarker answers instead. Default: off.
func WithXactStatusVerification() Option {
	return func(c *config) { c.verifier = xactStatusVerifier{readOnly: &c.txOpts.ReadOnly} }
}

type xactStatusVerifier struct{ readOnly *bool }

func (xactStatusVerifier) name() string { return "xact-status" }

func (v xactStatusVerifier) prepare(ctx context.Context, tx Tx) (string, error) {
	if *v.readOnly {
		return "", nil
	}
	// NULL when the transaction has no id.
	state, ok, err := queryString(ctx, tx, "SELECT pg_current_xact_id_if_assigned()::text || '/' || "+serverIdentity)
	if err != nil || !ok {
		return "", err
	}
	return state, nil
}

// serverIdentity is the SQL of the server's system identifier and WAL
// timeline, "<system id>/<timeline>": a promoted standby has the
// primary's system identifier and the next timeline.
const serverIdentity = "(SELECT system_identifier FROM pg_control_system())::text || '/' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"

// verify asks pg_xact_status about the transaction id of state
// ("<xid>/<system id>/<timeline>", see prepare), on the server that ran the
// transaction only: after a failover the promoted standby's counter may
// have given that id to another transaction.
func (xactStatusVerifier) verify(ctx context.Context, begin beginFunc, state string) (bool, error) {
	if state == "" {
		return false, nil // nothing was written: re-running is harmless
	}
	xid, identity, _ := strings.Cut(state, "/")
	if xid == "" || strings.Trim(xid, "0123456789") != "" {
		return false, fmt.Errorf("%w: malformed transaction id", errUnresolvable)
	}
	tx, err := begin(ctx, TxOptions{ReadOnly: true})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx, probeTimeout) //nolint:errcheck // read-only probe
	answer, ok, err := queryString(ctx, tx, "SELECT "+serverIdentity+" || '/' || coalesce(pg_xact_status('"+xid+"'::xid8), 'null')")
	if err == nil && !ok {
		err = errors.New("txretry: the server's identity query returned NULL")
	}
	if err != nil {
		return false, err
	}
	i := strings.LastIndexByte(answer, '/')
	if answer[:max(i, 0)] != identity {
		return false, fmt.Errorf("%w: the server is not the one that ran the transaction (system identifier or timeline changed, as by a failover), and a transaction id names another transaction there; use WithCommitMarker across failovers", errUnresolvable)
	}
	switch status := answer[i+1:]; {
	case status == "null":
		return false, fmt.Errorf("%w: pg_xact_status returned NULL (transaction id too old)", errUnresolvable)
	case status == "committed":
		return true, nil
	case status == "aborted":
		return false, nil
	case status == "in progress":
		return false, errInProgress
	default:
		return false, fmt.Errorf("%w: pg_xact_status returned %q", errUnresolvable, status)
	}
}

// queryString runs query through tx's QueryString method (see Tx).
func queryString(ctx context.Context, tx Tx, query string) (s string, valid bool, err error) {
	q, ok := tx.(interface {
		QueryString(ctx context.Context, query string) (string, bool, error)
	})
	if !ok {
		return "", false, fmt.Errorf("%w: WithXactStatusVerification needs a QueryString method, which the transaction type %T does not have", ErrInvalidOption, tx)
	}
	return q.QueryString(ctx, query)
}

// WithCommitMarker verifies uncertain commits with a marker row, on any
// engine and a pool handle (like WithXactStatusVerification); it is the
// natural choice on MySQL and MariaDB. Just before COMMIT
// it inserts a random token into table (whose shape is fixed: see
// CommitMarkerDDL). After an uncertain commit it inserts the same token on a
// fresh connection and rolls that probe back: a duplicate-key error means
// the lost transaction committed; success means it did not. Unlike a plain
// read, the probe waits while the lost transaction still holds the token's
// key lock, so it cannot answer before that transaction has ended. table is
// an identifier, optionally qualified by a schema (letters, digits and
// underscores, not starting with a digit); anything else makes the call
// return ErrInvalidOption. Markers accumulate: delete old ones with the
// statement from PurgeCommitMarkersSQL. A read-only transaction (WithReadOnly)
// writes no marker, which the database would reject: it has nothing to
// verify, and after an uncertain commit it is simply re-run. Default: off.
func WithCommitMarker(table string) Option {
	return func(c *config) {
		if err := validIdentifier(table); err != nil {
			c.fail("WithCommitMarker(%q): %v", table, err)
			return
		}
		c.verifier = markerVerifier{table: table, readOnly: &c.txOpts.ReadOnly}
	}
}

type markerVerifier struct {
	table    string
	readOnly *bool
}

func (markerVerifier) name() string { return "commit-marker" }

func (v markerVerifier) prepare(ctx context.Context, tx Tx) (string, error) {
	if *v.readOnly {
		return "", nil
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	token := hex.EncodeToString(b[:])
	return token, tx.Exec(ctx, v.insert(token))
}

func (v markerVerifier) insert(token string) string {
	return "INSERT INTO " + v.table + " (token) VALUES ('" + token + "')"
}

func (v markerVerifier) verify(ctx context.Context, begin beginFunc, token string) (bool, error) {
	if token == "" {
		return false, nil // read-only: nothing was written, re-running is harmless
	}
	tx, err := begin(ctx, TxOptions{})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx, probeTimeout) //nolint:errcheck // the probe is always undone
	err = tx.Exec(ctx, v.insert(token))
	switch {
	case err == nil:
		if lazyUniqueCheck(ctx, tx) {
			return false, fmt.Errorf("%w: on optimistic TiDB with tidb_constraint_check_in_place=OFF an INSERT does not see an existing marker until COMMIT; set it ON for the pool", errUnresolvable)
		}
		return false, nil
	case pgerr.Has(err, pgerr.UniqueViolation) || mysqlerr.Has(err, mysqlerr.DupEntry):
		return true, nil
	default:
		return false, err
	}
}

// lazyUniqueCheck reports a TiDB session in optimistic mode that checks
// unique keys only at COMMIT (tidb_constraint_check_in_place=OFF, TiDB's
// default): there the probe's INSERT succeeds even when the marker was
// committed, and its answer "not committed" would be wrong. Other servers
// reject the query (no such variables), which means no.
func lazyUniqueCheck(ctx context.Context, tx Tx) bool {
	q, ok := tx.(interface {
		QueryString(ctx context.Context, query string) (string, bool, error)
	})
	if !ok {
		return false
	}
	s, _, err := q.QueryString(ctx, "SELECT CONCAT(@@tidb_txn_mode, ':', @@tidb_constraint_check_in_place)")
	if err != nil {
		return false
	}
	mode, inPlace, _ := strings.Cut(strings.ToLower(s), ":")
	return mode == "optimistic" && (inPlace == "0" || inPlace == "off")
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

func validIdentifier(name string) error {
	if !identRE.MatchString(name) {
		return errors.New("not a plain identifier (letters, digits, underscores; optionally schema.table)")
	}
	return nil
}

// CommitMarkerDDL returns the statement that creates the marker table used
// by WithCommitMarker, if it does not exist. The same statement works on
// PostgreSQL, MySQL and MariaDB:
//
//	CREATE TABLE IF NOT EXISTS <table> (
//	    token VARCHAR(64) NOT NULL PRIMARY KEY,
//	    created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
//	)
//
// txretry inserts only token. Operators may create the table themselves.
func CommitMarkerDDL(table string) (string, error) {
	if err := validIdentifier(table); err != nil {
		return "", fmt.Errorf("%w: table %q: %v", ErrInvalidOption, table, err)
	}
	return "CREATE TABLE IF NOT EXISTS " + table +
		" (token VARCHAR(64) NOT NULL PRIMARY KEY, created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)", nil
}

// PurgeCommitMarkersSQL returns the statement that deletes markers older
// than olderThan (whole seconds), for PostgreSQL, MySQL and MariaDB alike.
// Keep olderThan well above the verification timeout: an hour is plenty.
func PurgeCommitMarkersSQL(table string, olderThan time.Duration) (string, error) {
	if err := validIdentifier(table); err != nil {
		return "", fmt.Errorf("%w: table %q: %v", ErrInvalidOption, table, err)
	}
	if olderThan < time.Second {
		return "", fmt.Errorf("%w: olderThan %v: must be at least a second", ErrInvalidOption, olderThan)
	}
	return fmt.Sprintf("DELETE FROM %s WHERE created_at < LOCALTIMESTAMP - INTERVAL '%d' SECOND",
		table, int64(olderThan/time.Second)), nil
}

// verify runs the configured verifier until it answers, retrying errors with
// the backoff within the verification timeout, the time budget and ctx.
func (c *call) verify(ctx context.Context, state string) (committed bool, err error) {
	cfg := c.cfg
	deadline := c.deadline
	vctx, cancel := context.WithTimeout(ctx, cfg.verifyTimeout)
	defer cancel()
	if !deadline.IsZero() {
		var c2 context.CancelFunc
		vctx, c2 = context.WithDeadline(vctx, deadline)
		defer c2()
	}
	defer func() {
		if len(cfg.observers) > 0 {
			res := Unresolved
			if err == nil && committed {
				res = VerifiedCommitted
			} else if err == nil {
				res = VerifiedNotCommitted
			}
			c.observe(ctx, Event{Kind: CommitVerified, Label: cfg.label, Verifier: cfg.verifier.name(),
				Verification: res, Code: errCode(err), ErrType: errType(err)})
		}
	}()
	begin := beginFunc(c.a.begin)
	if c.a.singleConn() {
		// The handle's only connection is the one that was lost: a
		// built-in verifier cannot get another one through it.
		begin = func(ctx context.Context, o TxOptions) (Tx, error) {
			tx, err := c.a.begin(ctx, o)
			if err != nil {
				return nil, fmt.Errorf("%w: the handle is a single connection, lost with the commit; use a pool (*sql.DB, *pgxpool.Pool) or WithVerify: %w", errUnresolvable, err)
			}
			return tx, nil
		}
	}
	for try := 1; ; try++ {
		committed, err = cfg.verifier.verify(vctx, begin, state)
		if err == nil || errors.Is(err, errUnresolvable) || vctx.Err() != nil {
			return committed, err
		}
		delay := max(cfg.backoff.Delay(try, cfg.rand()), 0)
		if connectionLost(err) { // the server the verifier asks is away, as a restart does
			delay = max(connLossBackoff.Delay(try, cfg.rand()), 0)
		}
		if d, ok := vctx.Deadline(); ok && cfg.clock.Now().Add(delay).After(d) {
			return false, err
		}
		if werr := c.wait(vctx, delay); werr != nil {
			return false, errors.Join(err, werr)
		}
	}
}
