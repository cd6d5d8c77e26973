// Outbox is a queue worker built on txretry: jobs in a table, claimed with
// SELECT ... FOR UPDATE SKIP LOCKED, each one claimed, processed and marked
// done in one transaction run by txretry.RunInTx, with a dead-letter table
// for the jobs that cannot be processed.
//
// A job whose call exhausts its retries (txretry.ErrRetriesExhausted) or
// fails permanently goes to the dead-letter table with its payload, its
// correlation id, the final reason and the reason of every attempt (the
// SQLSTATE or MySQL error number, class and Go error type that an observer
// collects from txretry's events, never an error message), and an alert hook
// fires. The reprocess subcommand moves dead letters back to the queue.
//
// The workers of Queue.Serve do not poll the queue when it is empty: the
// commit of Enqueue (or Reprocess) wakes them, through a txretry.AfterCommit
// hook that sends to each waiting worker's one-slot channel without
// blocking. Registered in fn, the hook runs once the transaction committed,
// so a woken worker finds the jobs; called inside a caller's RunInTx on the
// same db, Enqueue joins the caller's transaction (the outbox pattern) and
// the hook waits for that commit. A poll interval (-poll, an hour by
// default) only catches jobs that no commit of this process announced.
//
// Usage:
//
//	go run ./outbox [run] [-jobs 40] [-workers 4] [-rejects 2] [-poison 1] [-poll 1h] [-db all|postgres|mysql]
//	go run ./outbox reprocess [-fixed=true] [-work=true]
//
// run drops and creates the tables, starts the workers (Serve), enqueues
// the jobs (-rejects of them are rejected by the processor, a permanent
// error; -poison of them raise a serialization failure on every attempt:
// SQLSTATE 40001 on PostgreSQL, error 1213 on MySQL), whose commit wakes the
// workers, stops them once every job was processed or dead-lettered and
// prints the summary and the dead letters. reprocess moves the dead letters
// back to the queue and works it until it is empty (Work), by default with
// the processor "fixed" (the simulated failures switched off, as after
// deploying a fix).
//
// SKIP LOCKED needs PostgreSQL 9.5, MySQL 8.0 or MariaDB 10.6.
package main
