# Shared helpers of galera.sh, pgbouncer.sh and tidb.sh; sourced, never run.
# shellcheck shell=bash

CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN_DIR="$CLUSTER_DIR/.run"
mkdir -p "$RUN_DIR"

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# now prints the seconds since the epoch, with milliseconds.
now() { date +%s.%3N; }

# elapsed START prints the seconds since START (from now), e.g. "12.3".
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# as_root runs a command as root: directly when we are root, else with sudo.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo -n "$@"
	else
		die "need root (or sudo) to run: $*"
	fi
}

# ensure_packages PKG... installs the Debian packages that are missing, once.
# It prints the packages it installed on stdout.
ensure_packages() {
	local missing=() p aptlog
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	command -v apt-get >/dev/null 2>&1 ||
		die "missing packages ${missing[*]} and no apt-get to install them"
	log "installing ${missing[*]}"
	aptlog=$(mktemp)
	if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$aptlog" 2>&1 ||
		! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends "${missing[@]}" >>"$aptlog" 2>&1; then
		tail -n 20 "$aptlog" >&2
		rm -f "$aptlog"
		die "apt-get could not install ${missing[*]}"
	fi
	rm -f "$aptlog"
	echo "${missing[*]}"
}

# port_busy PORT reports whether something listens on 127.0.0.1:PORT.
port_busy() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# pid_alive PID reports whether PID is a running process (a zombie is not).
pid_alive() {
	local state
	[ -n "$1" ] || return 1
	state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# stop_process PID NAME SECONDS sends SIGTERM to PID, SIGKILL when it has
# not exited within SECONDS, and waits until the process is gone and reaped
# (a detached server's parent, init, reaps it a little later). Nothing
# happens when PID is empty or not running.
stop_process() {
	local pid=$1 name=$2 secs=$3 i
	pid_alive "$pid" || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < secs * 10; i++)); do
		pid_alive "$pid" || break
		sleep 0.1
	done
	if pid_alive "$pid"; then
		log "$name (pid $pid) did not stop within ${secs}s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	for ((i = 0; i < 50; i++)); do
		[ -e "/proc/$pid" ] || break
		sleep 0.1
	done
}

# write_env merges the env fragments of the scripts into .run/env, which
# .ci/run sources. A script that stops removes its fragment first.
write_env() {
	local out="$RUN_DIR/env" tmp f
	tmp=$(mktemp "$RUN_DIR/env.XXXXXX")
	echo "# Written by integration/cluster scripts; source it." >"$tmp"
	for f in "$RUN_DIR"/galera.env "$RUN_DIR"/pgbouncer.env "$RUN_DIR"/tidb.env; do
		[ -f "$f" ] && cat "$f" >>"$tmp"
	done
	if [ "$(wc -l <"$tmp")" -le 1 ]; then
		rm -f "$tmp" "$out"
	else
		mv -f "$tmp" "$out"
	fi
}

# forget_base LOG keeps BASE/LOG, the server's log, as .run/<LOG>-last.log
# (without its .log), then removes the script's folder and state file.
forget_base() {
	if [ -n "$BASE" ]; then
		[ -f "$BASE/$1" ] && cp "$BASE/$1" "$RUN_DIR/${1%.log}-last.log"
		rm -rf "$BASE"
	fi
	rm -f "$STATE"
	BASE=""
}

# cmd_stop is every script's stop: it withdraws the script's env fragment,
# then, if the script's servers run, stops them with the script's
# cmd_stop_quiet and says how long that took.
cmd_stop() {
	local t0
	t0=$(now)
	rm -f "$ENV_PART"
	write_env
	if [ -z "$BASE" ]; then
		log "not running"
		return 0
	fi
	cmd_stop_quiet
	log "stopped in $(elapsed "$t0")s"
}
