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
// Usage:
//
//	go run ./outbox [run] [-jobs 40] [-workers 4] [-rejects 2] [-poison 1] [-db all|postgres|mysql]
//	go run ./outbox reprocess [-fixed=true] [-work=true]
//
// run drops and creates the tables, enqueues the jobs (-rejects of them are
// rejected by the processor, a permanent error; -poison of them raise a
// serialization failure on every attempt: SQLSTATE 40001 on PostgreSQL,
// error 1213 on MySQL), works the queue until it is empty and prints the
// summary and the dead letters. reprocess moves the dead letters back to the
// queue and works it again, by default with the processor "fixed" (the
// simulated failures switched off, as after deploying a fix).
//
// SKIP LOCKED needs PostgreSQL 9.5, MySQL 8.0 or MariaDB 10.6.
package main
