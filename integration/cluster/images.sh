#!/usr/bin/env bash
# images.sh builds local Docker images of database servers from Debian
# packages, for the container path of txretry's tests and for make matrix,
# without any registry: each Debian suite's root comes from
# `debootstrap --variant=minbase`, is imported as txretry/debian:<suite>,
# and a small Dockerfile per server installs the server from Debian.
#
# Usage: images.sh build [NAME...]   build the missing images (default: all)
#        images.sh list              print every NAME, its image and whether it exists
#        images.sh names             print the image references, one a line
#
#   NAME           image                   Debian suite and package
#   postgres-15    txretry/postgres:15     bookworm postgresql-15
#   postgres-17    txretry/postgres:17     trixie   postgresql-17
#   postgres-18    txretry/postgres:18     sid      postgresql-18
#   mariadb-10.11  txretry/mariadb:10.11   bookworm mariadb-server
#   mariadb-11.8   txretry/mariadb:11.8    trixie   mariadb-server
#   mysql-9.7      txretry/mysql:9.7       sid      mysql-server (Oracle MySQL)
#
# Idempotent: an existing image built from the current Dockerfile and
# entrypoint (its label org.txretry.recipe) is kept (IMAGES_REBUILD=1
# rebuilds it), and so are the base images and the root tarballs cached in
# ${TXRETRY_CACHE_DIR:-$XDG_CACHE_HOME/txretry}/debian/<suite>.tar. A build
# fails when the package's version is not the one of the tag. IMAGES_JOBS
# (3) builds run at once; each step's time is logged and appended to
# .run/images.times. DEBIAN_MIRROR (http://deb.debian.org/debian) is the
# mirror. Builds use the host's network (docker build --network host), so
# that dockerd needs no NAT. The images' entrypoint honours the official
# images' variables (POSTGRES_USER/PASSWORD/DB; MYSQL_ROOT_PASSWORD,
# MYSQL_ALLOW_EMPTY_PASSWORD, MYSQL_DATABASE, MYSQL_USER/PASSWORD and their
# MARIADB_* names) and logs the lines testcontainers' postgres, mysql and
# mariadb modules wait for.
set -euo pipefail

PROG=images.sh
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

CACHE=${TXRETRY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/txretry}/debian
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
JOBS=${IMAGES_JOBS:-3}
TIMES="$RUN_DIR/images.times"

# NAME -> "image suite package version-check"
declare -A SPEC=(
	[postgres-15]="txretry/postgres:15 bookworm postgresql-15 pg:15"
	[postgres-17]="txretry/postgres:17 trixie postgresql-17 pg:17"
	[postgres-18]="txretry/postgres:18 sid postgresql-18 pg:18"
	[mariadb-10.11]="txretry/mariadb:10.11 bookworm mariadb-server my:10.11"
	[mariadb-11.8]="txretry/mariadb:11.8 trixie mariadb-server my:11.8"
	[mysql-9.7]="txretry/mysql:9.7 sid mysql-server my:9.7"
)
ORDER=(postgres-15 postgres-17 postgres-18 mariadb-10.11 mariadb-11.8 mysql-9.7)

# timed STEP COMMAND... runs COMMAND and logs how long STEP took.
timed() {
	local step=$1 t0 rc=0
	shift
	t0=$(now)
	"$@" || rc=$?
	log "$step: $(elapsed "$t0")s$([ "$rc" -eq 0 ] || echo " (failed: exit $rc)")"
	echo "$(date -u +%FT%TZ) $step $(elapsed "$t0")s rc=$rc" >>"$TIMES"
	return "$rc"
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# root_tar SUITE creates the suite's minbase root tarball unless cached.
root_tar() {
	local suite=$1 root="$CACHE/$1.root"
	[ -s "$CACHE/$suite.tar" ] && return 0
	command -v debootstrap >/dev/null 2>&1 || ensure_packages debootstrap >/dev/null
	rm -rf "$root"
	debootstrap --variant=minbase "$suite" "$root" "$MIRROR" >"$CACHE/$suite.debootstrap.log" 2>&1 ||
		{ tail -n 20 "$CACHE/$suite.debootstrap.log" >&2; return 1; }
	tar -C "$root" -cf "$CACHE/$suite.tar.tmp" . && mv "$CACHE/$suite.tar.tmp" "$CACHE/$suite.tar"
	rm -rf "$root"
}

# base SUITE makes txretry/debian:SUITE, once even when builds of the same
# suite run at once (a lock per suite).
base() {
	local suite=$1
	(
		flock 9
		image_exists "txretry/debian:$suite" && exit 0
		if [ -s "$CACHE/$suite.tar" ]; then
			log "reusing $CACHE/$suite.tar"
		else
			timed "debootstrap $suite" root_tar "$suite"
		fi
		timed "import txretry/debian:$suite" docker import "$CACHE/$suite.tar" "txretry/debian:$suite" >/dev/null
	) 9>"$CACHE/$suite.lock"
}

# dockerfile SUITE PACKAGE CHECK prints the image's Dockerfile.
dockerfile() {
	local suite=$1 pkg=$2 check=$3 verify post cmd port
	case $check in
	pg:*)
		verify="test -x /usr/lib/postgresql/${check#pg:}/bin/postgres"
		post="true"
		cmd=postgres port=5432
		;;
	my:*)
		verify="(mysqld --version || mariadbd --version) 2>/dev/null | grep -F ' Ver ${check#my:}.'"
		# Log to stderr (docker logs); a data directory of the entrypoint's
		# (the packages' own has other root accounts), so that a container
		# starts its server once.
		cmd=mysqld port=3306
		[ "$pkg" = mariadb-server ] && cmd=mariadbd
		post="sed -i -E '/^[[:space:]]*log[-_]error/d' \$(grep -rl . /etc/mysql); txretry-entrypoint init-datadir $cmd"
		;;
	esac
	# The install layer comes first, so that a changed entrypoint reuses it.
	cat <<EOF
FROM txretry/debian:$suite
RUN set -eux; \\
	printf 'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n' >/etc/apt/apt.conf.d/99txretry; \\
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; \\
	mkdir -p /etc/postgresql-common; echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf; \\
	apt-get update -qq; \\
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Options::=--force-confold $pkg >/dev/null; \\
	apt-get clean; rm -rf /var/lib/apt/lists/*; \\
	$verify
COPY entrypoint.sh /usr/local/bin/txretry-entrypoint
RUN $post
LABEL org.txretry.recipe=$recipe
ENTRYPOINT ["/usr/local/bin/txretry-entrypoint"]
CMD ["$cmd"]
EXPOSE $port
EOF
}

# docker_build IMAGE DIR LOG builds DIR's Dockerfile as IMAGE, output to LOG.
# The legacy builder: Debian's dockerd has no BuildKit front end here.
docker_build() {
	DOCKER_BUILDKIT=0 docker build -q --network host -t "$1" "$2" >"$3" 2>&1
}

# build_one NAME builds NAME's image unless it exists and was built from
# the current recipe (Dockerfile and entrypoint, a label of the image).
build_one() {
	local name=$1 image suite pkg check dir recipe="" rc=0
	read -r image suite pkg check <<<"${SPEC[$name]}"
	recipe=$({ dockerfile "$suite" "$pkg" "$check"; cat "$CLUSTER_DIR/images-entrypoint.sh"; } |
		sha256sum | cut -c1-16)
	if [ "${IMAGES_REBUILD:-}" != 1 ] &&
		[ "$(docker image inspect -f '{{index .Config.Labels "org.txretry.recipe"}}' "$image" 2>/dev/null)" = "$recipe" ]; then
		log "$image exists"
		return 0
	fi
	base "$suite" || return 1
	dir=$(mktemp -d)
	dockerfile "$suite" "$pkg" "$check" >"$dir/Dockerfile"
	cp "$CLUSTER_DIR/images-entrypoint.sh" "$dir/entrypoint.sh"
	chmod 755 "$dir/entrypoint.sh"
	timed "build $image" docker_build "$image" "$dir" "$RUN_DIR/images-$name.log" || rc=$?
	[ "$rc" -eq 0 ] || tail -n 20 "$RUN_DIR/images-$name.log" >&2
	rm -rf "$dir"
	return "$rc"
}

cmd_build() {
	local names=("$@") n failed=0 t0
	[ ${#names[@]} -gt 0 ] || names=("${ORDER[@]}")
	for n in "${names[@]}"; do
		[ -n "${SPEC[$n]:-}" ] || die "unknown image $n (want one of: ${ORDER[*]})"
	done
	docker info >/dev/null 2>&1 || die "no Docker engine answers (integration/cluster/docker.sh start)"
	mkdir -p "$CACHE"
	t0=$(now)
	for n in "${names[@]}"; do
		while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
		rm -f "$RUN_DIR/images-$n.rc"
		(
			rc=0
			build_one "$n" || rc=$?
			echo "$rc" >"$RUN_DIR/images-$n.rc"
		) &
	done
	wait
	for n in "${names[@]}"; do
		[ "$(cat "$RUN_DIR/images-$n.rc" 2>/dev/null)" = 0 ] || failed=$((failed + 1))
		rm -f "$RUN_DIR/images-$n.rc"
	done
	# Earlier builds of a rebuilt image, now untagged.
	docker image prune -f --filter label=org.txretry.recipe >/dev/null 2>&1 || true
	log "${#names[@]} image(s) ready in $(elapsed "$t0")s, $failed failed"
	[ "$failed" -eq 0 ]
}

cmd_list() {
	local n image rest
	for n in "${ORDER[@]}"; do
		read -r image rest <<<"${SPEC[$n]}"
		printf '%-14s %-22s %s\n' "$n" "$image" "$(image_exists "$image" && echo present || echo missing)"
	done
}

case "${1:-}" in
build) shift; cmd_build "$@" ;;
list) cmd_list ;;
names) for n in "${ORDER[@]}"; do read -r image _ <<<"${SPEC[$n]}"; echo "$image"; done ;;
*) echo "usage: $PROG build [NAME...]|list|names" >&2; exit 2 ;;
esac
