#!/bin/bash
# Entrypoint of the images that images.sh builds (copied into each image as
# /usr/local/bin/txretry-entrypoint). It honours the official postgres,
# mysql and mariadb images' variables and logs the lines the testcontainers
# modules wait for:
#   postgres: "database system is ready to accept connections" twice (the
#             server's own lines: a setup server, then the final one);
#   mysql:    "port: 3306  MySQL Community Server", and mariadb:
#             "port: 3306  mariadb.org binary distribution": Debian's
#             servers log another version comment, so this script logs the
#             line itself once the server answers on TCP port 3306. The
#             data directory is initialized when the image is built and the
#             variables applied with --init-file: one server start.
set -euo pipefail

say() { printf '%s [txretry-entrypoint] %s\n' "$(date -u +%FT%TZ)" "$*" >&2; }

postgres_main() {
	local bin user pw db pwfile auth
	bin=$(echo /usr/lib/postgresql/*/bin)
	export PGDATA=${PGDATA:-/var/lib/postgresql/data}
	mkdir -p "$PGDATA" /var/run/postgresql
	chown postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA"
	if [ ! -s "$PGDATA/PG_VERSION" ]; then
		user=${POSTGRES_USER:-postgres}
		pw=${POSTGRES_PASSWORD:-}
		db=${POSTGRES_DB:-$user}
		if [ -z "$pw" ] && [ "${POSTGRES_HOST_AUTH_METHOD:-}" != trust ]; then
			say "error: POSTGRES_PASSWORD is not set (or POSTGRES_HOST_AUTH_METHOD=trust)"
			exit 1
		fi
		pwfile=$(mktemp)
		printf '%s\n' "$pw" >"$pwfile"
		chown postgres "$pwfile"
		auth=scram-sha-256
		[ -n "$pw" ] || auth=trust
		runuser -u postgres -- "$bin/initdb" -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --locale=C \
			--auth-local=trust --auth-host="$auth" >/dev/null
		rm -f "$pwfile"
		echo "host all all all $auth" >>"$PGDATA/pg_hba.conf"
		runuser -u postgres -- "$bin/pg_ctl" -D "$PGDATA" -w -o "-c listen_addresses=''" start
		if [ "$db" != postgres ]; then
			runuser -u postgres -- "$bin/psql" -v ON_ERROR_STOP=1 -qU "$user" -d postgres \
				-c "CREATE DATABASE \"$db\""
		fi
		runuser -u postgres -- "$bin/pg_ctl" -D "$PGDATA" -w -m fast stop
	fi
	exec runuser -u postgres -- "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' "$@"
}

mysql_main() {
	local server=$1 admin root_pw empty db user pw init=/var/run/mysqld/txretry-init.sql pid comment i
	shift
	admin=mysqladmin comment="MySQL Community Server - GPL"
	if [ "$server" = mariadbd ]; then
		admin=mariadb-admin comment="mariadb.org binary distribution"
	fi
	root_pw=${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}
	empty=${MARIADB_ALLOW_EMPTY_ROOT_PASSWORD:-${MYSQL_ALLOW_EMPTY_PASSWORD:-}}
	db=${MARIADB_DATABASE:-${MYSQL_DATABASE:-}}
	user=${MARIADB_USER:-${MYSQL_USER:-}}
	pw=${MARIADB_PASSWORD:-${MYSQL_PASSWORD:-}}
	mkdir -p /var/run/mysqld /var/lib/mysql
	chown mysql:mysql /var/run/mysqld /var/lib/mysql
	# The image holds a data directory initialized at build time (root
	# without a password, on localhost only); an empty one is initialized
	# here.
	[ -d /var/lib/mysql/mysql ] || init_datadir "$server"
	# skip-name-resolve, as the official images: no reverse lookup of each
	# client's address (the container has no resolver it may reach; each
	# lookup would cost a connection 10 s).
	set -- --user=mysql --datadir=/var/lib/mysql --bind-address=0.0.0.0 --port=3306 --skip-name-resolve "$@"
	if [ ! -e /var/lib/mysql/.txretry-configured ]; then
		if [ -z "$root_pw" ] && [ -z "$empty" ]; then
			say "error: set MYSQL_ROOT_PASSWORD or MYSQL_ALLOW_EMPTY_PASSWORD (or their MARIADB_ names)"
			exit 1
		fi
		# The variables take effect through --init-file, run once by the
		# server as it starts: no second server start.
		{
			echo "CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY '$root_pw';"
			echo "GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;"
			echo "ALTER USER 'root'@'localhost' IDENTIFIED BY '$root_pw';"
			[ -z "$db" ] || echo "CREATE DATABASE IF NOT EXISTS \`$db\`;"
			if [ -n "$user" ] && [ "$user" != root ]; then
				echo "CREATE USER IF NOT EXISTS '$user'@'%' IDENTIFIED BY '$pw';"
				[ -z "$db" ] || echo "GRANT ALL ON \`$db\`.* TO '$user'@'%';"
			fi
		} >"$init"
		chown mysql "$init"
		touch /var/lib/mysql/.txretry-configured
		set -- "$@" --init-file="$init"
	fi
	"$server" "$@" &
	pid=$!
	trap 'kill -TERM "$pid" 2>/dev/null' TERM INT
	for ((i = 0; ; i++)); do
		# ping exits 0 even when access is denied: the server answers.
		"$admin" -h127.0.0.1 -P3306 -uroot --connect-timeout=1 ping >/dev/null 2>&1 && break
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" || exit $?
			exit 1
		fi
		sleep 0.2
	done
	say "$("$server" --version | tr -s ' ') ready for connections. port: 3306  $comment (the line testcontainers waits for)"
	wait "$pid" || exit $?
}

# init_datadir SERVER initializes /var/lib/mysql: root@localhost without a
# password. The image build runs it too.
init_datadir() {
	if [ "$1" = mariadbd ]; then
		mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db \
			--auth-root-authentication-method=normal >/dev/null
	else
		mysqld --initialize-insecure --user=mysql --datadir=/var/lib/mysql
	fi
}

case "${1:-}" in
postgres) shift; postgres_main "$@" ;;
mysqld | mariadbd) mysql_main "$@" ;;
init-datadir) rm -rf /var/lib/mysql/* && init_datadir "$2" ;;
*) exec "$@" ;;
esac
