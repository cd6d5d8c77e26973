package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/txretry/txretry/integration/dbserver"
	"github.com/txretry/txretry/txretry"
)

// What a job's payload can ask the processor to simulate.
const (
	simulateReject = "reject" // a permanent error
	simulatePoison = "poison" // a serialization failure on every attempt
)

// Payload is a job's content.
type Payload struct {
	Order    int    `json:"order"`
	Simulate string `json:"simulate,omitempty"`
}

// Job is a claimed job.
type Job struct {
	ID            int64
	CorrelationID string
	Payload       string
}

// AttemptRecord is what is kept of one failed attempt at a job: codes and
// types, never an error message (which can quote row data).
type AttemptRecord struct {
	Worker  int    `json:"worker"`
	Attempt int    `json:"attempt"`
	Class   string `json:"class"`
	Code    string `json:"code,omitempty"`
	Type    string `json:"type"`
}

// DeadLetter is a job that could not be processed.
type DeadLetter struct {
	Job
	Reason   string
	Attempts []AttemptRecord
}

// RejectedError is the processor's permanent refusal of a job. Its text
// never contains the payload.
type RejectedError struct {
	Why string
}

// Error implements error.
func (e *RejectedError) Error() string { return "rejected: " + e.Why }

var (
	// errQueueEmpty ends a worker's call when no job is left to claim.
	errQueueEmpty = errors.New("queue empty")
	// errJobTaken ends a call whose job another worker claimed.
	errJobTaken = errors.New("job taken by another worker")
)

// Queue is the job queue of one namespace.
type Queue struct {
	db     *sql.DB
	engine dbserver.Engine
	t      tables
	// Alert is called after a job entered the dead-letter table. It must
	// be quick; a real one would page or post to a channel. Default: none.
	Alert func(DeadLetter)
	// Done is called once a job's processing committed, on the worker's
	// goroutine: once per job, however many attempts its call took, and
	// never for an attempt rolled back (it is a txretry.AfterCommit hook).
	// It must be quick. Default: none.
	Done func(Job)
	// Fixed makes the processor ignore the simulated failures, as after a
	// fix was deployed.
	Fixed bool
	// MaxAttempts is the attempt limit of each job's call. Default 5.
	MaxAttempts int
	// ProcessTime is how long processing a job takes. Default 0.
	ProcessTime time.Duration

	// waiting, if set, is called when a worker of Serve begins to wait
	// for work: the tests' hook.
	waiting func()

	mu       sync.Mutex
	inFlight map[int64]int             // job → worker whose call has it pinned
	history  map[int64][]AttemptRecord // job → its failed attempts so far
	wakers   map[chan struct{}]bool    // the wake-up channels of Serve's workers
}

// tables are the queue's table names.
type tables struct {
	jobs, processed, deadLetters, poison string
}

// NewQueue returns the queue over db whose tables live in ns.
func NewQueue(db *sql.DB, ns dbserver.Namespace) *Queue {
	return &Queue{
		db:     db,
		engine: ns.Engine,
		t: tables{
			jobs:        ns.Table("outbox_jobs"),
			processed:   ns.Table("outbox_processed"),
			deadLetters: ns.Table("outbox_dead_letters"),
			poison:      ns.Table("outbox_simulate_deadlock"),
		},
		MaxAttempts: 5,
		inFlight:    map[int64]int{},
		history:     map[int64][]AttemptRecord{},
		wakers:      map[chan struct{}]bool{},
	}
}

// Setup drops and creates the tables (and, on MySQL, the procedure that
// simulates a deadlock).
func (q *Queue) Setup(ctx context.Context) error {
	stmts := []string{
		"DROP TABLE IF EXISTS " + q.t.jobs,
		"DROP TABLE IF EXISTS " + q.t.processed,
		"DROP TABLE IF EXISTS " + q.t.deadLetters,
		"CREATE TABLE " + q.t.jobs + ` (
			id BIGINT PRIMARY KEY,
			correlation_id VARCHAR(32) NOT NULL,
			payload TEXT NOT NULL)`,
		"CREATE TABLE " + q.t.processed + ` (
			job_id BIGINT PRIMARY KEY,
			correlation_id VARCHAR(32) NOT NULL,
			result TEXT NOT NULL,
			worker INT NOT NULL)`,
		"CREATE TABLE " + q.t.deadLetters + ` (
			job_id BIGINT PRIMARY KEY,
			correlation_id VARCHAR(32) NOT NULL,
			payload TEXT NOT NULL,
			reason TEXT NOT NULL,
			attempts TEXT NOT NULL,
			dead_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
	}
	if q.engine == dbserver.MySQL {
		// SIGNAL outside a stored program is a MariaDB extension.
		stmts = append(stmts,
			"DROP PROCEDURE IF EXISTS "+q.t.poison,
			"CREATE PROCEDURE "+q.t.poison+`()
			SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'simulated deadlock'`)
	}
	for _, s := range stmts {
		if _, err := q.db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("set up tables: %w", err)
		}
	}
	return nil
}

// NewCorrelationID returns a random correlation id: 16 hex digits.
func NewCorrelationID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// Enqueue adds jobs with ids first, first+1, ... and the given payloads,
// each with a fresh correlation id, in one transaction, and wakes Serve's
// workers once it committed. Called inside a RunInTx call on the queue's
// db, with fn's context, Enqueue joins that transaction, as the outbox
// pattern has it (the jobs commit with the caller's writes, or not at all),
// and the workers are woken when that transaction commits.
func (q *Queue) Enqueue(ctx context.Context, first int64, payloads []Payload) error {
	insert := q.engine.Rebind("INSERT INTO " + q.t.jobs + " (id, correlation_id, payload) VALUES (?, ?, ?)")
	return txretry.RunInTx(ctx, q.db, func(ctx context.Context, tx *sql.Tx) error {
		for i, p := range payloads {
			b, err := json.Marshal(p)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, insert, first+int64(i), NewCorrelationID(), string(b)); err != nil {
				return err
			}
		}
		// Not before the commit: a worker woken earlier would find no
		// job and go back to sleep.
		txretry.AfterCommit(ctx, func(context.Context) { q.wakeWorkers() })
		return nil
	}, txretry.WithLabel("enqueue"))
}

// Stats are the counts of a Work run.
type Stats struct {
	Processed   int
	DeadLetters int
	Attempts    int
}

// Work runs workers until the queue is empty (or ctx ends) and returns what
// they did. An error means a worker could not go on (for example, the
// database went away); the jobs it had are back in the queue.
func (q *Queue) Work(ctx context.Context, workers int) (Stats, error) {
	var mu sync.Mutex
	var errs []error
	stats := q.run(ctx, workers, nil, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	})
	return stats, errors.Join(errs...)
}

// Serve runs workers until ctx ends and returns what they did. A worker that
// finds the queue empty waits until a commit that enqueued jobs (Enqueue,
// Reprocess) wakes it, through txretry.AfterCommit, or until poll has
// passed: the fallback for jobs that other processes enqueue. Each such
// commit wakes every waiting worker. The error is that of a worker that
// could not go on, which stops the others; nil when ctx ended.
func (q *Queue) Serve(ctx context.Context, workers int, poll time.Duration) (Stats, error) {
	serveCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	stats := q.run(serveCtx, workers, func(ctx context.Context, wake <-chan struct{}) bool {
		if q.waiting != nil {
			q.waiting()
		}
		timer := time.NewTimer(poll)
		defer timer.Stop()
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			return false
		}
		return true
	}, stop)
	if ctx.Err() != nil {
		return stats, nil // ended by ctx
	}
	return stats, context.Cause(serveCtx) // a worker's error, which stopped the others
}

// wakeWorkers wakes Serve's workers: those waiting for work now, and the
// busy ones as soon as they are done (each holds one wake-up).
func (q *Queue) wakeWorkers() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for wake := range q.wakers {
		select {
		case wake <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// run runs workers until they all return and adds up what they did. wait
// is what a worker does when the queue is empty (nil: it stops; wait
// returns false to stop it); fail gets the error of a worker that could
// not go on.
func (q *Queue) run(ctx context.Context, workers int, wait func(ctx context.Context, wake <-chan struct{}) bool, fail func(error)) Stats {
	stats := make([]Stats, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var err error
			if stats[w], err = q.worker(ctx, w+1, wait); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	var total Stats
	for _, s := range stats {
		total.Processed += s.Processed
		total.DeadLetters += s.DeadLetters
		total.Attempts += s.Attempts
	}
	return total
}

// worker handles jobs one after the other until none is left, and then, if
// wait is not nil, waits for more, on a wake-up channel of its own that
// wakeWorkers sends to, until wait returns false.
func (q *Queue) worker(ctx context.Context, id int, wait func(ctx context.Context, wake <-chan struct{}) bool) (Stats, error) {
	wake := make(chan struct{}, 1) // keeps a wake-up that comes while the worker is busy
	if wait != nil {
		q.mu.Lock()
		q.wakers[wake] = true
		q.mu.Unlock()
		defer func() {
			q.mu.Lock()
			delete(q.wakers, wake)
			q.mu.Unlock()
		}()
	}
	var s Stats
	for ctx.Err() == nil {
		empty, err := q.handleNext(ctx, id, &s)
		if err != nil {
			return s, err
		}
		if empty && (wait == nil || !wait(ctx, wake)) {
			return s, nil
		}
	}
	return s, ctx.Err()
}

// handleNext claims and processes the next job in one RunInTx call, and
// moves the job to the dead-letter table if the call fails. done reports
// that the queue was empty.
//
// Every attempt of the call claims the same job: the first attempt takes the
// first free one (FOR UPDATE SKIP LOCKED, so that workers never wait for each
// other), and later attempts claim that job again by id (errJobTaken if it
// is gone, handled by another process meanwhile). Between attempts the
// job is unlocked (its transaction was rolled back); the other workers of
// this process leave it alone (inFlight), so that the retries of one call
// concern one job and the call can exhaust them.
func (q *Queue) handleNext(ctx context.Context, worker int, s *Stats) (done bool, err error) {
	var pinned *Job     // the call's job, once claimed
	var claimedNow bool // the current attempt claimed pinned
	observer := txretry.ObserverFunc(func(_ context.Context, e txretry.Event) {
		switch e.Kind {
		case txretry.AttemptStarted:
			claimedNow = false
			s.Attempts++
		case txretry.AttemptFailed:
			if pinned != nil && claimedNow {
				q.record(pinned.ID, AttemptRecord{
					Worker: worker, Attempt: e.Attempt, Class: e.Class.String(), Code: e.Code, Type: e.ErrType,
				})
			}
		}
	})
	defer func() {
		if pinned != nil {
			q.mu.Lock()
			delete(q.inFlight, pinned.ID)
			q.mu.Unlock()
		}
	}()

	err = txretry.RunInTx(ctx, q.db, func(ctx context.Context, tx *sql.Tx) error {
		job, err := q.claim(ctx, tx, worker, pinned)
		if err != nil {
			return err
		}
		pinned, claimedNow = &job, true
		if err := q.process(ctx, tx, worker, job); err != nil {
			return err
		}
		if q.Done != nil {
			txretry.AfterCommit(ctx, func(context.Context) { q.Done(job) })
		}
		return nil
	}, txretry.WithLabel("outbox job"), txretry.WithObserver(observer), txretry.WithMaxAttempts(q.MaxAttempts),
		// READ COMMITTED, also on MySQL and MariaDB (whose default is
		// REPEATABLE READ): there a locking read keeps the locks of every
		// row it scanned, so the claim query would hold jobs it skipped
		// until its transaction ends, and the other workers would skip
		// them. PostgreSQL's default is READ COMMITTED already.
		txretry.WithIsolation(sql.LevelReadCommitted))

	switch {
	case err == nil:
		s.Processed++
		q.forget(pinned.ID)
		return false, nil
	case errors.Is(err, errQueueEmpty):
		return true, nil
	case errors.Is(err, errJobTaken):
		return false, nil
	case pinned == nil || ctx.Err() != nil:
		// No job to blame (BEGIN failed, the database is gone) or we
		// are stopping: the job, if any, is back in the queue.
		return false, err
	}
	// Exhausted or permanent: the job goes to the dead letters.
	dl, moved, dlErr := q.deadLetter(ctx, *pinned, describeFailure(err))
	if dlErr != nil {
		return false, fmt.Errorf("dead-letter job %d: %w", pinned.ID, dlErr)
	}
	if moved {
		s.DeadLetters++
		if q.Alert != nil {
			q.Alert(dl)
		}
	}
	return false, nil
}

// claim locks the job to process: pinned again if set, else the first
// free job that no other worker of this process has pinned.
func (q *Queue) claim(ctx context.Context, tx *sql.Tx, worker int, pinned *Job) (Job, error) {
	var query string
	var args []any
	if pinned != nil {
		// Wait, rather than skip: a worker whose claim query ran with
		// a stale in-flight list may hold the job for a moment, until
		// it sees that the job is ours and rolls back.
		query = "SELECT id, correlation_id, payload FROM " + q.t.jobs +
			" WHERE id = ? FOR UPDATE"
		args = []any{pinned.ID}
	} else {
		q.mu.Lock()
		query = "SELECT id, correlation_id, payload FROM " + q.t.jobs
		if len(q.inFlight) > 0 {
			query += " WHERE id NOT IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(q.inFlight)), ", ") + ")"
			for id := range q.inFlight {
				args = append(args, id)
			}
		}
		q.mu.Unlock()
		query += " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
	}
	var j Job
	err := tx.QueryRowContext(ctx, q.engine.Rebind(query), args...).Scan(&j.ID, &j.CorrelationID, &j.Payload)
	switch {
	case errors.Is(err, sql.ErrNoRows) && pinned != nil:
		return Job{}, errJobTaken
	case errors.Is(err, sql.ErrNoRows):
		return Job{}, errQueueEmpty
	case err != nil:
		return Job{}, err
	}
	if pinned == nil {
		q.mu.Lock()
		defer q.mu.Unlock()
		if owner, ok := q.inFlight[j.ID]; ok && owner != worker {
			// The query ran with a stale list, while the owner was
			// between attempts: leave the job to its owner.
			return Job{}, errJobTaken
		}
		q.inFlight[j.ID] = worker
	}
	return j, nil
}

// process does the job's work in the claiming transaction and marks it
// done: a row in the processed table, the job deleted from the queue.
func (q *Queue) process(ctx context.Context, tx *sql.Tx, worker int, j Job) error {
	var p Payload
	if err := json.Unmarshal([]byte(j.Payload), &p); err != nil {
		return &RejectedError{Why: "payload is not valid JSON"}
	}
	if !q.Fixed {
		switch p.Simulate {
		case simulateReject:
			return &RejectedError{Why: "simulated permanent failure"}
		case simulatePoison:
			// The database reports a serialization failure, as a real
			// conflict would, on every attempt.
			stmt := "DO $$ BEGIN RAISE EXCEPTION 'simulated serialization failure' USING ERRCODE = '40001'; END $$"
			if q.engine == dbserver.MySQL {
				stmt = "CALL " + q.t.poison + "()"
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
	}
	if q.ProcessTime > 0 {
		select {
		case <-time.After(q.ProcessTime):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	result := fmt.Sprintf("order %d shipped", p.Order)
	if _, err := tx.ExecContext(ctx, q.engine.Rebind(
		"INSERT INTO "+q.t.processed+" (job_id, correlation_id, result, worker) VALUES (?, ?, ?, ?)"),
		j.ID, j.CorrelationID, result, worker); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, q.engine.Rebind("DELETE FROM "+q.t.jobs+" WHERE id = ?"), j.ID)
	return err
}

// record keeps a failed attempt at job id.
func (q *Queue) record(id int64, r AttemptRecord) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.history[id] = append(q.history[id], r)
}

// forget drops the history of job id.
func (q *Queue) forget(id int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.history, id)
}

// deadLetter moves job j to the dead-letter table with reason and its
// attempts. It waits for the job's row if another process holds it; moved
// is false if the job was no longer in the queue by then (that process
// handled it).
func (q *Queue) deadLetter(ctx context.Context, j Job, reason string) (dl DeadLetter, moved bool, err error) {
	q.mu.Lock()
	attempts := q.history[j.ID]
	q.mu.Unlock()
	dl = DeadLetter{Job: j, Reason: reason, Attempts: attempts}
	history, err := json.Marshal(attempts)
	if err != nil {
		return dl, false, err
	}
	err = txretry.RunInTx(ctx, q.db, func(ctx context.Context, tx *sql.Tx) error {
		moved = false
		err := tx.QueryRowContext(ctx, q.engine.Rebind(
			"SELECT payload FROM "+q.t.jobs+" WHERE id = ? FOR UPDATE"), j.ID).Scan(&dl.Payload)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q.engine.Rebind(
			"INSERT INTO "+q.t.deadLetters+" (job_id, correlation_id, payload, reason, attempts) VALUES (?, ?, ?, ?, ?)"),
			j.ID, j.CorrelationID, dl.Payload, reason, string(history)); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q.engine.Rebind("DELETE FROM "+q.t.jobs+" WHERE id = ?"), j.ID); err != nil {
			return err
		}
		moved = true
		return nil
	}, txretry.WithLabel("dead letter"))
	if err == nil && moved {
		q.forget(j.ID)
	}
	return dl, moved, err
}

// DeadLetters lists the dead-letter table in job order.
func (q *Queue) DeadLetters(ctx context.Context) (list []DeadLetter, err error) {
	rows, err := q.db.QueryContext(ctx,
		"SELECT job_id, correlation_id, payload, reason, attempts FROM "+q.t.deadLetters+" ORDER BY job_id")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, rows.Close()) }()
	for rows.Next() {
		var dl DeadLetter
		var attempts string
		if err := rows.Scan(&dl.ID, &dl.CorrelationID, &dl.Payload, &dl.Reason, &attempts); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(attempts), &dl.Attempts); err != nil {
			return nil, fmt.Errorf("dead letter %d: attempts: %w", dl.ID, err)
		}
		list = append(list, dl)
	}
	return list, rows.Err()
}

// Reprocess moves dead letters back to the queue, with their correlation ids
// and payloads: all of them, or only those with the given job ids, and
// wakes Serve's workers once it committed. It returns how many it moved.
func (q *Queue) Reprocess(ctx context.Context, ids ...int64) (int, error) {
	where, args := "", []any{}
	if len(ids) > 0 {
		where = " WHERE job_id IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + ")"
		for _, id := range ids {
			args = append(args, id)
		}
	}
	var moved int64
	err := txretry.RunInTx(ctx, q.db, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q.engine.Rebind(
			"INSERT INTO "+q.t.jobs+" (id, correlation_id, payload) SELECT job_id, correlation_id, payload FROM "+
				q.t.deadLetters+where), args...)
		if err != nil {
			return err
		}
		if moved, err = res.RowsAffected(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q.engine.Rebind("DELETE FROM "+q.t.deadLetters+where), args...); err != nil {
			return err
		}
		txretry.AfterCommit(ctx, func(context.Context) { q.wakeWorkers() })
		return nil
	}, txretry.WithLabel("reprocess"))
	return int(moved), err
}

// Counts returns the number of rows in the queue, the processed table and
// the dead-letter table.
func (q *Queue) Counts(ctx context.Context) (queued, processed, dead int, err error) {
	err = q.db.QueryRowContext(ctx, fmt.Sprintf("SELECT (SELECT COUNT(*) FROM %s), (SELECT COUNT(*) FROM %s), (SELECT COUNT(*) FROM %s)",
		q.t.jobs, q.t.processed, q.t.deadLetters)).Scan(&queued, &processed, &dead)
	return queued, processed, dead, err
}

// describeFailure renders the error of a failed call without row data:
// why retrying stopped, if it did, and the last error.
func describeFailure(err error) string {
	if re, ok := errors.AsType[*txretry.RetryError](err); ok {
		return fmt.Sprintf("retries exhausted (%s) after %d attempts, last error %s",
			re.Reason, re.Attempts, txretry.Describe(re.Err))
	}
	return txretry.Describe(err)
}
