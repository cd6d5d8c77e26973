#!/usr/bin/env bash
# tidb.sh runs a throwaway TiDB server (unistore: TiDB's SQL and transaction
# layers over an embedded store, in one process) on 127.0.0.1 for txretry's
# engine tests and benchmark.
#
# Usage: tidb.sh start|stop|status|env|build
#
#   start   build tidb-server if the cache does not hold it yet (see build),
#           start it in unistore mode on two free ports (SQL from TIDB_PORT,
#           default 23400, status from TIDB_STATUS_PORT, default 23480),
#           wait until it answers SQL and print the DSN. Idempotent: a
#           running server is left alone.
#   stop    stop the server (SIGTERM, SIGKILL after 20 s), wait until its
#           process is gone, then delete its data. Safe when nothing runs.
#   status  print the pid and the ports; exit 0 only if it answers SQL.
#   env     print the env file line (TXRETRY_TIDB_DSN=...).
#   build   only build the binary into the cache (nothing if already there).
#
# The binary is built from the Go module proxy, never from this repository's
# modules: TIDB_VERSION of github.com/pingcap/tidb and TIDB_PARSER_VERSION of
# its nested module github.com/pingcap/tidb/pkg/parser (which the tidb module
# zip leaves out) are downloaded with `go mod download`, copied to a
# temporary folder, the parser placed at pkg/parser, and ./cmd/tidb-server
# built there (about 5 minutes on 2 cores, 244 MB). The result is cached
# outside the repository, keyed by version:
#   ${TXRETRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/txretry}/tidb/VERSION/tidb-server
# TIDB_SERVER=/path/to/tidb-server skips the build and uses that binary.
#
# The build enables TiDB's failpoints (failpoint-ctl, as TiDB's own test
# builds do); they stay off unless named in GO_FAILPOINTS. start enables
# one: the status port's /fail/ API, with which a test makes one COMMIT
# fail with 8022 (ErrTxnRetryable), which TiDB otherwise raises only on
# TiKV's retryable key errors. Data, logs and
# temporary files live in a temporary directory recorded in .run/tidb.state;
# .run/env exports TXRETRY_TIDB_DSN and TXRETRY_TIDB_STATUS.
set -euo pipefail

PROG=tidb.sh
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

TIDB_VERSION=${TIDB_VERSION:-v1.1.0-beta.0.20251126154744-e4e814fdc0af}
TIDB_PARSER_VERSION=${TIDB_PARSER_VERSION:-v0.0.0-20251126154744-e4e814fdc0af}
CACHE_ROOT=${TXRETRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/txretry}
CACHED_BIN="$CACHE_ROOT/tidb/$TIDB_VERSION/tidb-server"
STATE="$RUN_DIR/tidb.state"
ENV_PART="$RUN_DIR/tidb.env"
BASE_PORT=${TIDB_PORT:-23400}
BASE_STATUS_PORT=${TIDB_STATUS_PORT:-23480}
START_TIMEOUT=${TIDB_START_TIMEOUT:-120}
STOP_TIMEOUT=20

BASE="" PORT="" STATUS_PORT=""
if [ -f "$STATE" ]; then
	BASE=$(sed -n 's/^BASE=//p' "$STATE")
	PORT=$(sed -n 's/^PORT=//p' "$STATE")
	STATUS_PORT=$(sed -n 's/^STATUS_PORT=//p' "$STATE")
fi

dsn() { echo "root@tcp(127.0.0.1:$PORT)/test"; }

binary() { echo "${TIDB_SERVER:-$CACHED_BIN}"; }

server_pid() {
	[ -n "$BASE" ] && [ -s "$BASE/launch.pid" ] && cat "$BASE/launch.pid"
	return 0
}

running() { pid_alive "$(server_pid)"; }

# answers reports whether the server runs a query.
answers() {
	[ -n "$PORT" ] || return 1
	mariadb --no-defaults -h 127.0.0.1 -P "$PORT" -u root --connect-timeout=2 \
		-N -B -e 'SELECT 1' >/dev/null 2>&1
}

# free_port FROM prints the first port from FROM on (up to 50 further) on
# which nothing listens. The ranges lie below Linux's ephemeral ports, for
# the reason given in galera.sh.
free_port() {
	local p
	for ((p = $1; p < $1 + 50; p++)); do
		port_busy "$p" || {
			echo "$p"
			return 0
		}
	done
	die "no free port in $1-$(($1 + 49))"
}

# cmd_build builds tidb-server into the cache unless it is there.
cmd_build() {
	local t0 tmp dir pdir fpctl fpver
	if [ -n "${TIDB_SERVER:-}" ]; then
		[ -x "$TIDB_SERVER" ] || die "TIDB_SERVER=$TIDB_SERVER is not an executable"
		return 0
	fi
	[ -x "$CACHED_BIN" ] && return 0
	command -v go >/dev/null 2>&1 || die "go not found: it builds tidb-server"
	t0=$(now)
	log "building tidb-server $TIDB_VERSION (once; about 5 minutes on 2 cores)"
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/txretry-tidb-build.XXXXXX")
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" EXIT
	# Outside the repository, so that none of its go.mod or go.work files
	# applies; GOFLAGS=-mod=mod lets the download record the checksums.
	(
		cd "$tmp"
		export GOWORK=off GOFLAGS=-mod=mod
		dir=$(go mod download -json "github.com/pingcap/tidb@$TIDB_VERSION" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		pdir=$(go mod download -json "github.com/pingcap/tidb/pkg/parser@$TIDB_PARSER_VERSION" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -d "$dir" ] && [ -d "$pdir" ] || exit 1
		cp -r "$dir" src
		chmod -R u+w src
		rm -rf src/pkg/parser
		cp -r "$pdir" src/pkg/parser
		chmod -R u+w src/pkg/parser
		cd src
		fpver=$(go list -m -f '{{.Version}}' github.com/pingcap/failpoint)
		GOBIN="$tmp/bin" go install "github.com/pingcap/failpoint/failpoint-ctl@$fpver"
		fpctl="$tmp/bin/failpoint-ctl"
		# As TiDB's Makefile does (failpoint-enable): every package but
		# the parser and the tools.
		find . -type d -not -path './pkg/parser*' -not -path './tools*' -not -path './.git*' |
			xargs "$fpctl" enable >/dev/null
		go build -o "$tmp/tidb-server" ./cmd/tidb-server
	) >"$tmp/build.log" 2>&1 || {
		tail -n 30 "$tmp/build.log" >&2
		die "building tidb-server did not succeed"
	}
	mkdir -p "$(dirname "$CACHED_BIN")"
	mv -f "$tmp/tidb-server" "$CACHED_BIN.tmp"
	mv -f "$CACHED_BIN.tmp" "$CACHED_BIN"
	rm -rf "$tmp"
	trap - EXIT
	log "built in $(elapsed "$t0")s: $CACHED_BIN"
}

write_env_part() {
	{
		echo "export TXRETRY_TIDB_DSN='$(dsn)'"
		echo "export TXRETRY_TIDB_STATUS='127.0.0.1:$STATUS_PORT'"
	} >"$ENV_PART"
	write_env
}

cmd_start() {
	local t0 bin i
	if running && answers; then
		write_env_part
		log "already running (pid $(server_pid))"
		dsn
		return 0
	fi
	command -v mariadb >/dev/null 2>&1 || ensure_packages mariadb-client >/dev/null
	cmd_build
	bin=$(binary)
	[ -n "$BASE" ] && cmd_stop_quiet
	t0=$(now)
	PORT=$(free_port "$BASE_PORT")
	STATUS_PORT=$(free_port "$BASE_STATUS_PORT")
	BASE=$(mktemp -d "${TMPDIR:-/tmp}/txretry-tidb.XXXXXX")
	mkdir -p "$BASE/data" "$BASE/tmp"
	printf 'BASE=%s\nPORT=%s\nSTATUS_PORT=%s\n' "$BASE" "$PORT" "$STATUS_PORT" >"$STATE"
	# TMPDIR: TiDB derives its spill folder from it.
	TMPDIR="$BASE/tmp" GO_FAILPOINTS='github.com/pingcap/tidb/pkg/server/enableTestAPI=return' \
		setsid "$bin" -store unistore -path "$BASE/data" \
		-host 127.0.0.1 -P "$PORT" -status-host 127.0.0.1 -status "$STATUS_PORT" \
		-socket "$BASE/tidb.sock" -temp-dir "$BASE/tmp" \
		-L warn -log-file "$BASE/tidb.log" -log-slow-query "$BASE/slow.log" \
		</dev/null >"$BASE/stdout.log" 2>&1 &
	echo $! >"$BASE/launch.pid"
	for ((i = 0; i < START_TIMEOUT * 10; i++)); do
		answers && break
		if ! running; then
			tail -n 20 "$BASE/stdout.log" "$BASE/tidb.log" >&2 2>/dev/null || true
			cmd_stop_quiet
			die "tidb-server exited while starting"
		fi
		sleep 0.1
	done
	if ! answers; then
		tail -n 20 "$BASE/tidb.log" >&2 || true
		cmd_stop_quiet
		die "tidb-server does not answer on 127.0.0.1:$PORT within ${START_TIMEOUT}s"
	fi
	mariadb --no-defaults -h 127.0.0.1 -P "$PORT" -u root -e 'CREATE DATABASE IF NOT EXISTS test' ||
		die "cannot create database test"
	write_env_part
	log "started in $(elapsed "$t0")s (pid $(server_pid), SQL port $PORT, status port $STATUS_PORT, files in $BASE)"
	dsn
}

# cmd_stop_quiet stops the server, waits until its process is gone (and
# reaped), then removes its files.
cmd_stop_quiet() {
	stop_process "$(server_pid)" tidb-server "$STOP_TIMEOUT"
	forget_base tidb.log
}

cmd_status() {
	if running && answers; then
		echo "tidb-server pid=$(server_pid) port=$PORT status=$STATUS_PORT store=unistore binary=$(binary)"
		return 0
	fi
	echo "not running"
	return 1
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
build) cmd_build ;;
env)
	[ -n "$PORT" ] || die "not running"
	echo "export TXRETRY_TIDB_DSN='$(dsn)'"
	echo "export TXRETRY_TIDB_STATUS='127.0.0.1:$STATUS_PORT'"
	;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
	;;
esac
