#!/usr/bin/env bash
# galera.sh runs a throwaway 3-node MariaDB Galera cluster on 127.0.0.1 for
# txretry's engine tests, next to (never instead of) a MariaDB on 3306.
#
# Usage: galera.sh start|stop|status|env
#        galera.sh stop-node N|kill-node N|start-node N|pid N   (N = 1, 2 or 3)
#
#   start       bootstrap node 1, then join nodes 2 and 3 one at a time, each
#               waiting for wsrep_local_state_comment = Synced; prints the three
#               go-sql-driver DSNs, one a line. Idempotent: a running cluster is
#               left alone, missing nodes are started again. Fails (and cleans
#               up) when the cluster is not synced within GALERA_START_TIMEOUT
#               seconds (default 90).
#   stop        stop the nodes one at a time (SIGTERM, SIGKILL after 20 s),
#               waiting until each process is gone and its pid file removed,
#               then delete the data. Safe when nothing runs.
#   status      print each node's pid and state; exit 0 only if all 3 are Synced.
#   env         print the env file lines (TXRETRY_GALERA_DSNS=...).
#   stop-node N stop node N gracefully (it leaves the cluster cleanly).
#   kill-node N SIGKILL node N (the others notice after evs.suspect_timeout).
#   start-node N start node N again and wait until it is Synced (IST or SST).
#   pid N       print node N's process id (for tests that freeze a node).
#
# Ports (all on 127.0.0.1): SQL 23061-23063, group communication 24561-24563,
# IST 24681-24683, rsync SST 24441-24443. Data lives in a temporary directory
# recorded in .run/galera.state; .run/env exports TXRETRY_GALERA_DSNS.
# Missing packages (galera-4, rsync) are installed with apt-get.
set -euo pipefail

PROG=galera.sh
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

STATE="$RUN_DIR/galera.state"
ENV_PART="$RUN_DIR/galera.env"
NODES=(1 2 3)
# Below Linux's ephemeral range (32768-60999): a client connecting to a port
# of that range while nothing listens can connect to itself (TCP self-connect)
# and then hold the port that the node is about to bind.
SQL_PORT=(0 23061 23062 23063)
GCOMM_PORT=(0 24561 24562 24563)
IST_PORT=(0 24681 24682 24683)
SST_PORT=(0 24441 24442 24443)
PROVIDER=/usr/lib/galera/libgalera_smm.so
START_TIMEOUT=${GALERA_START_TIMEOUT:-90}
STOP_TIMEOUT=20

BASE=""
[ -f "$STATE" ] && BASE=$(sed -n 's/^BASE=//p' "$STATE")

dsn() { echo "root@tcp(127.0.0.1:${SQL_PORT[$1]})/test"; }
dsns() { echo "$(dsn 1),$(dsn 2),$(dsn 3)"; }

node_dir() { echo "$BASE/node$1"; }
pid_file() { echo "$BASE/node$1/mariadbd.pid"; }

# node_pid N prints node N's pid: from its pid file, or from the pid recorded
# at launch while mariadbd has not written its pid file yet.
node_pid() {
	local f
	for f in "$(pid_file "$1")" "$(node_dir "$1")/launch.pid"; do
		if [ -s "$f" ]; then
			cat "$f"
			return 0
		fi
	done
}

node_running() {
	[ -n "$BASE" ] || return 1
	pid_alive "$(node_pid "$1")"
}

# sql N STATEMENT runs a statement on node N (through its Unix socket) and
# prints the result rows.
sql() {
	mariadb --no-defaults -S "$(node_dir "$1")/mariadbd.sock" -uroot \
		--connect-timeout=2 -N -B -e "$2" 2>/dev/null
}

wsrep_status() { sql "$1" "SHOW STATUS LIKE '$2'" | awk '{ print $2 }'; }

# mysqld_user prints the --user option: mariadbd refuses to run as root, so
# root runs it as the mysql account (or as root explicitly if there is none).
mysqld_user() {
	if [ "$(id -u)" -ne 0 ]; then
		return 0
	fi
	if id mysql >/dev/null 2>&1; then
		echo "--user=mysql"
	else
		echo "--user=root"
	fi
}

write_cnf() {
	local n=$1 dir
	dir=$(node_dir "$n")
	cat >"$dir/my.cnf" <<EOF
[mariadbd]
datadir=$dir/data
socket=$dir/mariadbd.sock
pid-file=$dir/mariadbd.pid
log-error=$dir/error.log
port=${SQL_PORT[$n]}
bind-address=127.0.0.1
skip-name-resolve
innodb_buffer_pool_size=32M
innodb_log_file_size=16M
innodb_flush_log_at_trx_commit=2
innodb_autoinc_lock_mode=2
performance_schema=OFF
max_connections=200
binlog_format=ROW
default_storage_engine=InnoDB
wsrep_on=ON
wsrep_provider=$PROVIDER
wsrep_cluster_name=txretry
wsrep_cluster_address=gcomm://127.0.0.1:${GCOMM_PORT[1]},127.0.0.1:${GCOMM_PORT[2]},127.0.0.1:${GCOMM_PORT[3]}
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:${GCOMM_PORT[$n]}
wsrep_node_incoming_address=127.0.0.1:${SQL_PORT[$n]}
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:${GCOMM_PORT[$n]};ist.recv_addr=127.0.0.1:${IST_PORT[$n]};gcache.size=32M"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:${SST_PORT[$n]}

[client]
socket=$dir/mariadbd.sock
EOF
}

# log_tail N prints the end of node N's error log, to explain a failure.
log_tail() {
	local f
	f="$(node_dir "$1")/error.log"
	[ -f "$f" ] && tail -n 25 "$f" | sed "s/^/  node$1: /" >&2
	return 0
}

# check_ports N fails when one of node N's ports is taken by another process.
check_ports() {
	local p
	for p in "${SQL_PORT[$1]}" "${GCOMM_PORT[$1]}" "${IST_PORT[$1]}" "${SST_PORT[$1]}"; do
		port_busy "$p" && die "port $p (node $1) is already in use by another process"
	done
	return 0
}

# launch_node N [--wsrep-new-cluster] starts mariadbd for node N in the
# background, detached from the caller's terminal and pipes.
launch_node() {
	local n=$1 dir
	shift
	dir=$(node_dir "$n")
	check_ports "$n"
	# A pid file left by a killed node would make the new one look dead.
	rm -f "$dir/launch.pid" "$dir/mariadbd.pid"
	# shellcheck disable=SC2046
	setsid mariadbd --defaults-file="$dir/my.cnf" $(mysqld_user) "$@" \
		</dev/null >>"$dir/stdout.log" 2>&1 &
	echo $! >"$dir/launch.pid"
}

# wait_synced N DEADLINE waits until node N reports Synced, or fails.
wait_synced() {
	local n=$1 deadline=$2 state=""
	while :; do
		if ! node_running "$n"; then
			log "node $n exited while starting; end of its error log:"
			log_tail "$n"
			return 1
		fi
		state=$(wsrep_status "$n" wsrep_local_state_comment || true)
		[ "$state" = Synced ] && return 0
		if awk -v d="$deadline" -v t="$(now)" 'BEGIN { exit !(t > d) }'; then
			log "node $n not Synced within ${START_TIMEOUT}s (state: ${state:-no answer}); end of its error log:"
			log_tail "$n"
			return 1
		fi
		sleep 0.25
	done
}

# prepare_node N creates node N's directory and configuration; node 1 of a
# new cluster gets system tables, the joiners receive everything by SST.
prepare_node() {
	local n=$1 dir
	dir=$(node_dir "$n")
	[ -f "$dir/my.cnf" ] && return 0
	mkdir -p "$dir/data"
	write_cnf "$n"
	if [ "$n" -eq 1 ]; then
		# shellcheck disable=SC2046
		mariadb-install-db --defaults-file="$dir/my.cnf" $(mysqld_user) \
			--auth-root-authentication-method=normal --skip-name-resolve \
			--skip-test-db >"$dir/install.log" 2>&1 ||
			{ cat "$dir/install.log" >&2; die "mariadb-install-db did not succeed"; }
	fi
	[ "$(id -u)" -eq 0 ] && id mysql >/dev/null 2>&1 && chown -R mysql:mysql "$dir"
	return 0
}

# stop_node N [SIGNAL] stops node N and waits until its process is gone and
# its pid file removed (a zombie counts as gone). SIGKILL is used after
# STOP_TIMEOUT seconds, or at once when SIGNAL is KILL.
stop_node() {
	local n=$1 sig=${2:-TERM} pid i
	pid=$(node_pid "$n")
	if ! pid_alive "$pid"; then
		rm -f "$(pid_file "$n")" "$(node_dir "$n")/launch.pid"
		return 0
	fi
	kill -s "$sig" "$pid" 2>/dev/null || true
	for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
		if ! pid_alive "$pid" && { [ "$sig" = KILL ] || [ ! -e "$(pid_file "$n")" ]; }; then
			break
		fi
		# The process may be gone while its pid file stays (killed): give
		# up on the pid file after 2 s.
		if ! pid_alive "$pid" && [ "$i" -ge 20 ]; then
			break
		fi
		sleep 0.1
	done
	if pid_alive "$pid"; then
		log "node $n (pid $pid) did not stop within ${STOP_TIMEOUT}s: SIGKILL"
		kill -s KILL "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			pid_alive "$pid" || break
			sleep 0.1
		done
	fi
	rm -f "$(pid_file "$n")" "$(node_dir "$n")/launch.pid"
	# A finished mariadbd stays a zombie until its parent (init, since the
	# process is detached) reaps it; give that a few seconds.
	for ((i = 0; i < 50; i++)); do
		[ -e "/proc/$pid" ] || break
		sleep 0.1
	done
}

any_running() {
	local n
	for n in "${NODES[@]}"; do
		node_running "$n" && return 0
	done
	return 1
}

write_env_part() {
	echo "export TXRETRY_GALERA_DSNS='$(dsns)'" >"$ENV_PART"
	write_env
}

# start_node N DEADLINE starts node N as a joiner of the running cluster.
start_joiner() {
	local n=$1 deadline=$2 t0
	t0=$(now)
	prepare_node "$n"
	launch_node "$n"
	wait_synced "$n" "$deadline" || return 1
	log "node $n joined and Synced in $(elapsed "$t0")s"
}

# on_start_exit stops whatever a failed start left running.
on_start_exit() {
	local rc=$?
	trap - EXIT
	if [ "$rc" -ne 0 ]; then
		log "start did not succeed: stopping the nodes (error logs kept in .run/galera-logs)"
		cmd_stop
	fi
	exit "$rc"
}

cmd_start() {
	local t0 deadline n
	command -v mariadbd >/dev/null 2>&1 ||
		die "mariadbd not found: install mariadb-server (10.4 or later)"
	ensure_packages galera-4 rsync >/dev/null
	[ -f "$PROVIDER" ] || die "Galera provider $PROVIDER not found"
	t0=$(now)
	deadline=$(awk -v t="$t0" -v d="$START_TIMEOUT" 'BEGIN { printf "%.3f", t + d }')
	trap on_start_exit EXIT

	if [ -n "$BASE" ] && ! any_running; then
		# Leftovers of a cluster that is no longer running: start afresh.
		rm -rf "$BASE"
		rm -f "$STATE"
		BASE=""
	fi
	if [ -z "$BASE" ]; then
		BASE=$(mktemp -d "${TMPDIR:-/tmp}/txretry-galera.XXXXXX")
		chmod 755 "$BASE"
		echo "BASE=$BASE" >"$STATE"
		prepare_node 1
		launch_node 1 --wsrep-new-cluster
		wait_synced 1 "$deadline" || die "cluster did not start"
		sql 1 "CREATE DATABASE IF NOT EXISTS test" ||
			die "cannot create database test on node 1"
		log "node 1 bootstrapped in $(elapsed "$t0")s"
	fi
	for n in "${NODES[@]}"; do
		node_running "$n" && continue
		start_joiner "$n" "$deadline" || die "cluster did not start"
	done
	for n in "${NODES[@]}"; do
		wait_synced "$n" "$deadline" || die "cluster did not start"
	done
	write_env_part
	trap - EXIT
	log "cluster of 3 Synced in $(elapsed "$t0")s (data in $BASE)"
	dsn 1
	dsn 2
	dsn 3
}

# cmd_stop_quiet stops the nodes, keeps their error logs and removes their
# files (cmd_stop, in common.sh, calls it).
cmd_stop_quiet() {
	local n
	for n in 3 2 1; do
		stop_node "$n"
	done
	# Keep the error logs of the last run, for a post-mortem in CI.
	rm -rf "$RUN_DIR/galera-logs"
	mkdir -p "$RUN_DIR/galera-logs"
	for n in "${NODES[@]}"; do
		[ -f "$(node_dir "$n")/error.log" ] &&
			cp "$(node_dir "$n")/error.log" "$RUN_DIR/galera-logs/node$n.log"
	done
	rm -rf "$BASE"
	rm -f "$STATE"
	BASE=""
}

cmd_status() {
	local n pid state size ok=0
	if [ -z "$BASE" ]; then
		echo "not running"
		return 1
	fi
	for n in "${NODES[@]}"; do
		pid=$(node_pid "$n")
		if node_running "$n"; then
			state=$(wsrep_status "$n" wsrep_local_state_comment || true)
			size=$(wsrep_status "$n" wsrep_cluster_size || true)
			echo "node$n pid=$pid port=${SQL_PORT[$n]} state=${state:-?} cluster_size=${size:-?}"
			[ "$state" = Synced ] || ok=1
		else
			echo "node$n stopped"
			ok=1
		fi
	done
	return $ok
}

node_arg() {
	case "${1:-}" in
	1 | 2 | 3) ;;
	*) die "node must be 1, 2 or 3" ;;
	esac
	[ -n "$BASE" ] || die "cluster not running"
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) echo "export TXRETRY_GALERA_DSNS='$(dsns)'" ;;
stop-node)
	node_arg "${2:-}"
	t0=$(now)
	stop_node "$2"
	log "node $2 stopped in $(elapsed "$t0")s"
	;;
kill-node)
	node_arg "${2:-}"
	stop_node "$2" KILL
	log "node $2 killed"
	;;
pid)
	node_arg "${2:-}"
	node_running "$2" || die "node $2 is not running"
	node_pid "$2"
	;;
start-node)
	node_arg "${2:-}"
	if node_running "$2"; then
		log "node $2 already running"
	else
		any_running || die "no node running to join: use start"
		start_joiner "$2" "$(awk -v t="$(now)" -v d="$START_TIMEOUT" 'BEGIN { printf "%.3f", t + d }')" ||
			die "node $2 did not rejoin"
	fi
	;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
	;;
esac
