#!/usr/bin/env bash
# pgbouncer.sh runs PgBouncer in transaction pooling mode on 127.0.0.1 in
# front of the local PostgreSQL, for txretry's engine tests.
#
# Usage: pgbouncer.sh start|stop|status|env
#
#   start   start PgBouncer (port PGBOUNCER_PORT, default 6432) in front of
#           PGBOUNCER_UPSTREAM_HOST:PGBOUNCER_UPSTREAM_PORT (default
#           127.0.0.1:5432), pool_mode = transaction, auth_type = trust for the
#           user postgres; database "test" and a wildcard entry, so that any
#           database of the server (such as a per-test one) is reachable under
#           its own name. Prints the DSN. Idempotent.
#   stop    stop PgBouncer and delete its files. Safe when nothing runs.
#   status  print the pid and the pool mode; exit 0 only if it answers.
#   env     print the env file line (TXRETRY_PGBOUNCER_DSN=...).
#
# PgBouncer refuses to run as root: run as root, the script starts it as the
# postgres account. Its files live in a temporary directory recorded in
# .run/pgbouncer.state; .run/env exports TXRETRY_PGBOUNCER_DSN. A missing
# pgbouncer package is installed with apt-get (and the service the package
# starts is stopped, since it would hold the port).
set -euo pipefail

PROG=pgbouncer.sh
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

STATE="$RUN_DIR/pgbouncer.state"
ENV_PART="$RUN_DIR/pgbouncer.env"
PORT=${PGBOUNCER_PORT:-6432}
UP_HOST=${PGBOUNCER_UPSTREAM_HOST:-127.0.0.1}
UP_PORT=${PGBOUNCER_UPSTREAM_PORT:-5432}
PG_USER=postgres
START_TIMEOUT=30
STOP_TIMEOUT=15

BASE=""
[ -f "$STATE" ] && BASE=$(sed -n 's/^BASE=//p' "$STATE")

dsn() { echo "postgres://$PG_USER@127.0.0.1:$PORT/test?sslmode=disable"; }

bouncer_pid() {
	[ -n "$BASE" ] && [ -s "$BASE/pgbouncer.pid" ] && cat "$BASE/pgbouncer.pid"
	return 0
}

running() { pid_alive "$(bouncer_pid)"; }

# answers reports whether a query through PgBouncer gets an answer.
answers() {
	PGCONNECT_TIMEOUT=2 psql -X -q -A -t \
		"host=127.0.0.1 port=$PORT user=$PG_USER dbname=test sslmode=disable" \
		-c 'SELECT 1' >/dev/null 2>&1
}

# run_as_owner runs a command as the postgres account when we are root.
run_as_owner() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u "$PG_USER" -- "$@"
	else
		"$@"
	fi
}

# stop_distro_service stops the pgbouncer service that installing the package
# may have started on the default port.
stop_distro_service() {
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		as_root systemctl stop pgbouncer >/dev/null 2>&1 || true
		as_root systemctl disable pgbouncer >/dev/null 2>&1 || true
	elif [ -x /etc/init.d/pgbouncer ]; then
		as_root /etc/init.d/pgbouncer stop >/dev/null 2>&1 || true
	fi
}

write_config() {
	cat >"$BASE/pgbouncer.ini" <<EOF
[databases]
test = host=$UP_HOST port=$UP_PORT dbname=test
* = host=$UP_HOST port=$UP_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
auth_type = trust
auth_file = $BASE/userlist.txt
admin_users = $PG_USER
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = $BASE/pgbouncer.log
pidfile = $BASE/pgbouncer.pid
EOF
	# auth_type = trust still needs the user to be listed.
	echo "\"$PG_USER\" \"\"" >"$BASE/userlist.txt"
}

write_env_part() {
	echo "export TXRETRY_PGBOUNCER_DSN='$(dsn)'" >"$ENV_PART"
	write_env
}

cmd_start() {
	local t0 installed i
	t0=$(now)
	if running && answers; then
		write_env_part
		log "already running (pid $(bouncer_pid))"
		dsn
		return 0
	fi
	installed=$(ensure_packages pgbouncer)
	command -v psql >/dev/null 2>&1 || ensure_packages postgresql-client >/dev/null
	case " $installed " in
	*" pgbouncer "*) stop_distro_service ;;
	esac
	if [ -n "$BASE" ]; then
		cmd_stop_quiet
	fi
	port_busy "$PORT" && die "port $PORT is already in use by another process"
	BASE=$(mktemp -d "${TMPDIR:-/tmp}/txretry-pgbouncer.XXXXXX")
	chmod 755 "$BASE"
	echo "BASE=$BASE" >"$STATE"
	write_config
	[ "$(id -u)" -eq 0 ] && chown -R "$PG_USER" "$BASE"
	if ! run_as_owner pgbouncer -d -q "$BASE/pgbouncer.ini" </dev/null >"$BASE/stdout.log" 2>&1; then
		cat "$BASE/stdout.log" "$BASE/pgbouncer.log" 2>/dev/null | tail -n 20 >&2
		cmd_stop_quiet
		die "pgbouncer did not start"
	fi
	for ((i = 0; i < START_TIMEOUT * 10; i++)); do
		answers && break
		sleep 0.1
	done
	if ! answers; then
		tail -n 20 "$BASE/pgbouncer.log" >&2 || true
		cmd_stop_quiet
		die "pgbouncer does not answer on 127.0.0.1:$PORT within ${START_TIMEOUT}s (is PostgreSQL up on $UP_HOST:$UP_PORT?)"
	fi
	write_env_part
	log "started in $(elapsed "$t0")s (pid $(bouncer_pid), files in $BASE)"
	dsn
}

# cmd_stop_quiet stops PgBouncer and waits until its process is gone (and
# reaped), then removes its files.
cmd_stop_quiet() {
	stop_process "$(bouncer_pid)" pgbouncer "$STOP_TIMEOUT"
	forget_base pgbouncer.log
}

cmd_status() {
	if running && answers; then
		echo "pgbouncer pid=$(bouncer_pid) port=$PORT pool_mode=transaction upstream=$UP_HOST:$UP_PORT"
		return 0
	fi
	echo "not running"
	return 1
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) echo "export TXRETRY_PGBOUNCER_DSN='$(dsn)'" ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
	;;
esac
