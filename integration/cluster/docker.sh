#!/usr/bin/env bash
# docker.sh runs a Docker daemon for txretry's container path (CI, make
# matrix) and removes what it added when it stops.
#
# Usage: docker.sh start|stop|status
#
#   start   install docker.io and debootstrap with apt-get if missing, start
#           dockerd in the background (log: .run/dockerd.log) and wait until
#           `docker info` answers. Nothing is started when an engine already
#           answers (then stop leaves it alone).
#   stop    remove the testcontainers containers left over, stop the dockerd
#           (and its containerd) that start started, then remove what it
#           added to the host's network: links (docker0, veth*), iptables
#           chains and nft tables, and restore net.ipv4.ip_forward; exit 1
#           if the network still differs from what start recorded.
#   status  exit 0 only if a Docker engine answers; print its version.
#
# dockerd runs with --iptables=false --ip-forward=false --ip-masq=false and
# publishes ports on 127.0.0.1 only (--ip): it adds no netfilter rules and
# forwards nothing off the machine; published ports reach the containers
# through docker-proxy on loopback. Images and containers live in
# DOCKER_DATA_ROOT (/var/lib/docker), which stop keeps, so that the images
# of images.sh are built once per machine.
set -euo pipefail

PROG=docker.sh
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

STATE="$RUN_DIR/docker.state"
BEFORE="$RUN_DIR/docker.before"
DATA_ROOT=${DOCKER_DATA_ROOT:-/var/lib/docker}
START_TIMEOUT=60
STOP_TIMEOUT=20

answers() { timeout 10 docker info >/dev/null 2>&1; }

# net_snapshot prints what docker.sh compares before and after: the links,
# the iptables rules, the nft tables and IP forwarding.
net_snapshot() {
	echo "# links"
	ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | sort
	echo "# ip_forward $(cat /proc/sys/net/ipv4/ip_forward)"
	if command -v iptables-save >/dev/null 2>&1; then
		echo "# iptables"
		iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9:]*\]//' || true
		ip6tables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9:]*\]//' || true
	fi
	if command -v nft >/dev/null 2>&1; then
		echo "# nft"
		nft list tables 2>/dev/null || true
	fi
}

cmd_start() {
	local t0 pid i
	if answers; then
		log "a Docker engine already answers; not starting dockerd"
		return 0
	fi
	ensure_packages docker.io debootstrap >/dev/null
	t0=$(now)
	[ -f "$BEFORE" ] || net_snapshot >"$BEFORE"
	nohup dockerd --data-root "$DATA_ROOT" --pidfile "$RUN_DIR/dockerd.pid" \
		--iptables=false --ip-forward=false --ip-masq=false --ip=127.0.0.1 \
		>"$RUN_DIR/dockerd.log" 2>&1 </dev/null &
	pid=$!
	echo "PID=$pid" >"$STATE"
	for ((i = 0; i < START_TIMEOUT * 5; i++)); do
		answers && break
		pid_alive "$pid" || { tail -n 20 "$RUN_DIR/dockerd.log" >&2; cmd_stop; die "dockerd exited"; }
		sleep 0.2
	done
	answers || { tail -n 20 "$RUN_DIR/dockerd.log" >&2; cmd_stop; die "dockerd did not answer in ${START_TIMEOUT}s"; }
	log "dockerd (pid $pid) answers in $(elapsed "$t0")s: $(server_version)"
}

server_version() {
	docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}} (client {{.Client.Version}}, API {{.Client.APIVersion}})' 2>/dev/null
}

cmd_stop() {
	local pid="" ctrd ids link t0 diffs
	t0=$(now)
	[ -f "$STATE" ] && pid=$(sed -n 's/^PID=//p' "$STATE")
	if [ -z "$pid" ]; then
		log "not started by docker.sh"
		return 0
	fi
	if pid_alive "$pid"; then
		ids=$(docker ps -aq --filter label=org.testcontainers=true 2>/dev/null || true)
		if [ -n "$ids" ]; then
			log "removing $(echo "$ids" | wc -w) leftover testcontainers container(s)"
			# shellcheck disable=SC2086
			docker rm -f $ids >/dev/null 2>&1 || true
		fi
		ctrd=$(cat /var/run/docker/containerd/containerd.pid 2>/dev/null || true)
		stop_process "$pid" dockerd "$STOP_TIMEOUT"
		stop_process "$ctrd" containerd "$STOP_TIMEOUT"
	fi
	# What dockerd added to the host's network.
	for link in $(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'); do
		case $link in
		docker0 | veth* | br-*)
			grep -qx "$link" "$BEFORE" 2>/dev/null || ip link delete "$link" 2>/dev/null || true
			;;
		esac
	done
	remove_netfilter
	if [ -f "$BEFORE" ]; then
		[ "$(cat /proc/sys/net/ipv4/ip_forward)" = "$(sed -n 's/^# ip_forward //p' "$BEFORE")" ] ||
			sysctl -qw net.ipv4.ip_forward="$(sed -n 's/^# ip_forward //p' "$BEFORE")" || true
		if ! diffs=$(diff "$BEFORE" <(net_snapshot)); then
			log "the host's network differs from before start:"
			echo "$diffs" >&2
			return 1
		fi
		rm -f "$BEFORE"
	fi
	rm -f "$STATE"
	log "stopped in $(elapsed "$t0")s; network as before start; images kept in $DATA_ROOT"
}

# remove_netfilter removes Docker's iptables chains (and the rules that
# jump to them) and nft tables that were not there before start. dockerd
# runs with --iptables=false, so normally there are none.
remove_netfilter() {
	local ipt table chain
	for ipt in iptables ip6tables; do
		command -v "$ipt" >/dev/null 2>&1 || continue
		# Listing a table can create it (iptables-nft): look only when
		# there is something of Docker's.
		"$ipt-save" 2>/dev/null | grep -q DOCKER || continue
		for table in filter nat; do
			"$ipt" -t "$table" -S 2>/dev/null | grep -E '^-A .* -j DOCKER' | sed 's/^-A/-D/' |
				while read -r rule; do
					# shellcheck disable=SC2086
					"$ipt" -t "$table" $rule 2>/dev/null || true
				done
			for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^DOCKER/ { print $2 }'); do
				"$ipt" -t "$table" -F "$chain" 2>/dev/null || true
			done
			for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^DOCKER/ { print $2 }'); do
				"$ipt" -t "$table" -X "$chain" 2>/dev/null || true
			done
		done
	done
	if command -v nft >/dev/null 2>&1 && [ -f "$BEFORE" ]; then
		nft list tables 2>/dev/null | while read -r _ family name; do
			grep -qx "table $family $name" "$BEFORE" || nft delete table "$family" "$name" 2>/dev/null || true
		done
	fi
}

cmd_status() {
	if answers; then
		echo "$(server_version)"
		return 0
	fi
	echo "no Docker engine answers"
	return 1
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*) echo "usage: $PROG start|stop|status" >&2; exit 2 ;;
esac
