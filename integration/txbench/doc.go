// Command txbench measures retry policies under contention: a closed loop of
// workers (or an open loop of arrivals, -rate) runs SERIALIZABLE
// transactions against PostgreSQL and MySQL/MariaDB,
// each call under its own deadline, and reports per retry policy ("runner"),
// side by side, how many calls committed within their deadline, how many
// failed and why, how much work each commit cost and how long calls took.
// After every run it checks the database against what the callers were told.
//
// Usage (from the integration module):
//
//	TXRETRY_PG_DSN='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' \
//	TXRETRY_MYSQL_DSN='root@tcp(127.0.0.1:3306)/test' \
//	go run ./txbench -workload hot -duration 10s -repeat 3
//
// # Workloads
//
// All transactions are SERIALIZABLE (on TiDB, see Drivers; oltp on MySQL and
// MariaDB, see oltp). Each workload has its own tables
// (prefix txbench_), dropped and recreated before every run, so that every run
// starts from the same state.
//
//   - hot: one hot row; each call reads its counter, writes the value read plus
//     one, and logs its call id in the same transaction.
//   - transfer10: transfers between 10 accounts; each call reads both
//     balances, writes both and logs the transfer.
//   - transfer10k: the same over 10,000 accounts (low contention).
//   - mixed: each call, drawn by its worker's seeded choices, is the hot
//     row's transaction with probability 10% and otherwise a transfer over
//     100,000 accounts; the two classes reach txretry through two distinct fn
//     literals, with no label. Below the table, per class (hot, cold): goodput,
//     fail%, p99, busy (the class's calls in flight on average: their summed
//     latency over the run's length) and the mean Queued of txretry's
//     CallFinished events. Each worker runs its calls in turn, so a worker
//     held by a hot call runs no cold one: the cold goodput follows how fast
//     the hot calls end (about 9 cold calls per hot call, whether it commits
//     or fails), and by Little's law the cold p99 grows with the cold busy.
//   - split: the calls of mixed, each class from workers of its own: 10% of
//     the workers (at least one; 3 of 32, the 11th, 22nd and 32nd, so in
//     different processes under -procs) run only the hot row's transaction,
//     the others only transfers. The cold figures no longer depend on the
//     hot calls' pace, only on what they cost the database and the manager.
//   - mixed-mv: the calls of mixed, the two classes passed to txretry as
//     method values of one type (pgxCall, sqlCall), with no label, as a user
//     passes the methods of a repository type: it measures how txretry keys
//     the contention domain of a method value.
//   - oltp: a TPC-C-like mix (written for txbench from the specification's
//     transaction profiles, not taken from a kit) over one warehouse, 10
//     districts, 3,000 customers and 10,000 items with their stock; no
//     order at the start. New-Order (45%) reads the warehouse and the
//     customer, takes and increments its district's next order id, inserts
//     the order, its new-order row and 5-15 lines, and updates each item's
//     stock; Payment (43%) adds to the warehouse's and the district's
//     year-to-date, takes from the customer's balance and inserts a history
//     row; Order-Status (4%) reads a customer's last order and its lines;
//     Delivery (4%) delivers, in each district, the oldest undelivered order
//     (deletes its new-order row, sets its carrier, stamps its lines, adds
//     their amount to the customer's balance) and logs itself; Stock-Level
//     (4%) counts the low-stock items among its district's last 20 orders'
//     lines. Every Payment writes the warehouse's row and every New-Order
//     and Payment its district's: they conflict there. On PostgreSQL the
//     transactions run SERIALIZABLE; on MySQL, MariaDB and TiDB REPEATABLE
//     READ, reading with SELECT … FOR UPDATE the rows they then write (the
//     district's next order id, the stock, the customer in Payment, the
//     oldest new-order row and its order in Delivery). Each kind reaches
//     txretry as a method value of one type, with WithLabel(its name), as a
//     careful user writes it. Below the table, a row per kind.
//   - oltp-mv: the calls of oltp without the labels: the domains are those
//     of the method values.
//
// The random choices of every worker (accounts, amounts, classes) are
// generated before the run (oltp: from the seed and the call's id),
// identically for every runner of the same repeat.
//
// # Open loop
//
// By default each worker runs its calls one after the other (a closed
// loop): a runner whose calls fail fast frees workers for the other calls,
// and by Little's law those then wait longer for the database, so that
// latencies compare at different loads. With -rate r the loop is open:
// calls arrive at r per second over all processes (a Poisson process, or
// evenly spaced with -arrivals uniform), whatever the workers' pace, and
// wait in a queue for one of the -workers workers; each call is timed and
// given its deadline from its arrival, so the time queued counts. An
// arrival that finds -max-inflight calls queued or running (default 10 x
// -workers) is dropped and counted. Arrival k of a process is call k/n of
// its k%n-th worker's stream, so the calls' inputs are the same for every
// runner. Under -procs each process gets its share of the rate and of the
// bound.
//
// # Runners
//
//   - txretry: txretry with its defaults (only WithIsolation), which include
//     a contention manager per database handle.
//   - txretry-nocm: the defaults without the contention manager
//     (WithoutContentionManager): backoff alone.
//   - txretry-budget: the defaults plus a retry budget per run
//     (NewRetryBudget(0.2, 10, nil), Finagle's defaults).
//   - txretry-nolocktimeout: the defaults with WithLockTimeout(0), as they
//     were before pgxretry bounded lock waits on PostgreSQL by default; on
//     MySQL and MariaDB, and through database/sql, the same as txretry.
//   - txretry-locktimeout: the defaults with WithLockTimeout(50 ms), which
//     is pgxretry's default: on pgxstdlib (database/sql) it adds SET LOCAL
//     lock_timeout after BEGIN; elsewhere the same as txretry.
//   - once: one attempt, no retry (BEGIN, body, COMMIT).
//   - immediate: retry at once, up to 10 attempts (hand-written loop).
//   - fixed10ms: wait 10 ms between attempts, up to 10 attempts.
//   - jitter: full jitter from 2 ms capped at 200 ms, up to 10 attempts.
//   - cenkalti: github.com/cenkalti/backoff/v5 Retry with its defaults,
//     retrying only serialization failures and deadlocks.
//   - serial: one worker with txretry's defaults: the serial limit.
//
// Peer runners use the driver directly (pgxpool for pgx, database/sql
// otherwise) and classify errors with packages pgerr and mysqlerr.
//
// # Drivers
//
// pgx (native, pgxpool), mysql (database/sql with go-sql-driver/mysql),
// pgxstdlib (database/sql with pgx's stdlib driver) and tidb (go-sql-driver
// on a TiDB server, not in the default -driver list). The DSNs come from
// TXRETRY_PG_DSN, TXRETRY_MYSQL_DSN and TXRETRY_TIDB_DSN; -pg-dsn,
// -mysql-dsn and -tidb-dsn override them. The MySQL DSN gets
// interpolateParams=true unless it sets it, to spare the prepare round trips
// on a machine whose CPU the servers share. On TiDB the transactions run in
// pessimistic mode under REPEATABLE READ and read their rows with SELECT …
// FOR UPDATE: TiDB refuses SERIALIZABLE unless told to skip the check, and
// then fails half the hot row's calls with 9007; under REPEATABLE READ a
// plain read then write loses updates.
//
// # Method
//
// Runs are interleaved: for each workload and driver, every repeat runs every
// runner once at every spread of -procs (serial once, in one process),
// starting each repeat at the next (runner, spread) pair (round robin), so
// that drifts of the machine spread over all of them. Each run opens its own
// pool (warmed up to one connection per worker) and closes it afterwards, so
// that no per-handle state survives between runs. Reported values are medians
// over the repeats; the ratio column is the median of the per-repeat ratios
// of goodput to the reference runner's (txretry's, when it runs) at the same
// spread, and "x serial" the median of the per-repeat ratios to serial's.
//
// A spread of P > 1 processes runs the -workers workers split as evenly as
// possible over P child processes (re-execs of txbench, 32 over 8: 4 each),
// each with its own pool and its own library state, as replicas of a service
// would: txretry's contention manager of a process sees only that process's
// transactions. The parent recreates the tables, starts the children, waits
// until all have warmed up their pools, releases them at the same moment,
// and merges their raw records (every call's outcome, latency and attempts,
// the committed call ids, the failed attempts by code) into one result:
// counts summed, percentiles over the calls of all processes, and one
// consistency check over all the calls. Children are killed when the parent
// exits or a run outlasts its duration by minutes; a failed child's stderr is
// reported with its number as prefix.
//
// # Measures
//
//   - procs, wk: the processes the workers were spread over, and the workers
//     of all of them.
//   - goodput: calls that committed within their deadline and within the run,
//     per second of run.
//   - fail%: calls that did not commit, over all calls, broken down into
//     exhausted (the policy's attempt limit or budget), deadline (the deadline
//     cut the call or the policy gave up for it), uncertain (a COMMIT whose
//     outcome is unknown) and other errors. late% counts calls that committed
//     after their deadline (txretry commits even if the deadline passes during
//     COMMIT).
//   - att/commit: attempts of all calls per committed call.
//   - p50, p99, p99.9: latency of all calls, failed ones included; a call still
//     running when the run ends counts with the time it had run until then.
//   - failed attempts by code: SQLSTATE or MySQL error number of the failed
//     attempts per run ("none" for errors without one, such as a deadline),
//     counted by an observer for txretry runners and by the loop for peers.
//   - check: the database after the run against what the callers were told.
//     Every committed call logged its id in the same transaction: every call
//     reported committed must be in the log, and every logged call must have
//     been reported committed or uncertain. hot: the counter equals the number
//     of logged calls. transfers: the sum of balances is unchanged, and every
//     balance equals its initial value plus the logged transfers, whose
//     accounts and amounts match the calls that made them. mixed and split:
//     both, each log holding only calls of its class. oltp: New-Order,
//     Payment and Delivery leave their call id in the order, the history or
//     the delivery log (Order-Status and Stock-Level write nothing and are
//     not compared), each with its call's inputs; every district's next
//     order id minus one equals its number of orders and its largest order
//     id; the warehouse's year-to-date equals the sum of its districts' and
//     its initial value plus the payments; the customers' balances, payments
//     and delivery counts follow the history and the delivered lines; orders,
//     new-order rows and lines agree on what was delivered; the stock's
//     year-to-date and order counts follow the lines.
//   - by class (mixed, split, mixed-mv, oltp, oltp-mv): a row per class or
//     kind of transaction with its goodput, fail% (and by reason), attempts
//     per commit, p50, p99, busy and the mean Queued of txretry's
//     CallFinished events.
//   - open loop: drop% (arrivals dropped at -max-inflight, over all
//     arrivals) and wait ms (mean time a call waited for a worker).
//
// # Flags
//
//	-workers n        concurrent workers (default 32; serial always uses 1)
//	-procs list       comma list of process counts to spread the workers over,
//	                  each spread a column of the matrix (default 1: all in
//	                  this process; for example 1,2,4,8)
//	-duration d       length of one run (default 10s)
//	-deadline d       deadline of one call (default 1s)
//	-repeat n         runs per runner (default 3)
//	-workload list    comma list of hot, transfer10, transfer10k, mixed, split,
//	                  mixed-mv, oltp, oltp-mv (default all)
//	-runners list     comma list of runners (default all)
//	-driver list      comma list of pgx, mysql, pgxstdlib (default pgx,mysql)
//	-pg-dsn, -mysql-dsn  override TXRETRY_PG_DSN, TXRETRY_MYSQL_DSN
//	-format f         table (default) or tsv, on standard output
//	-tsv file         also write the TSV (every run and the medians) to file
//	-chart file       also draw the medians' goodput and fail% against -procs,
//	                  per workload and driver, a line per runner, as a PNG
//	-seed n           seed of the workers' random choices (default 1)
//	-rate r           open loop: calls arriving per second over all processes
//	                  (default 0: closed loop)
//	-arrivals a       open loop's arrivals: poisson (default) or uniform
//	-max-inflight n   open loop: calls queued or running at once, beyond which
//	                  arrivals are dropped (default 10 x -workers)
//	-q                no progress lines on standard error
//
// The exit status is 1 when a run failed or a consistency check failed, and 2
// for bad flags.
package main
