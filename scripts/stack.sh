#!/usr/bin/env bash
# Local test stack for outbox-relay: PostgreSQL 15 + Kafka 4.1.1 (KRaft) + Apicurio Registry 3.3.3, no Docker.
# Ports, paths and verbs are fixed by docs/design.md ("The local stack").
#
#   scripts/stack.sh up | down | status | env | clean
#   scripts/stack.sh pg-start | pg-stop [fast|immediate|smart] | pg-restart | pg-crash (immediate stop, then start)
#   scripts/stack.sh kafka-start | kafka-stop
#   scripts/stack.sh registry-start | registry-stop
#   scripts/stack.sh kafka-class CLASS [ARGS...]   # run a class from the Kafka jars
#
# Everything lives in <repo>/.stack (pg/, kafka/ and registry/); Kafka jars are cached in
# ${OUTBOX_RELAY_CACHE:-$HOME/.cache/outbox-relay}/kafka-4.1.1/libs, the registry in .../apicurio-registry-3.3.3.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

STACK=$REPO/.stack
PG_LINK=$STACK/pg
KAFKA_DIR=$STACK/kafka
KAFKA_DATA=$KAFKA_DIR/data
KAFKA_PID=$KAFKA_DIR/kafka.pid
KAFKA_PROPS=$KAFKA_DIR/server.properties

PG_VERSION=15
PG_BIN=/usr/lib/postgresql/$PG_VERSION/bin
PG_PORT=55432
PG_DB=outbox
DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/$PG_DB?sslmode=disable"

kafka_use_version 4.1.1 # sets KAFKA_LIBS and the logging options (scripts/lib/common.sh)
KAFKA_PORT=19092
KAFKA_CONTROLLER_PORT=19093
# PROXIED listener: the broker listens on 19094 and advertises 127.0.0.1:19095, where
# network-cut tests run their own TCP proxy to 19094 (docs/design.md).
KAFKA_PROXIED_PORT=19094
KAFKA_PROXIED_ADVERTISED_PORT=19095
KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT
KAFKA_READY_TIMEOUT=${KAFKA_READY_TIMEOUT:-90}
KAFKA_STOP_TIMEOUT=20

registry_use_version 3.3.3 # sets REGISTRY_HOME, REGISTRY_ARTIFACT (scripts/lib/common.sh)
REGISTRY_DIR=$STACK/registry
REGISTRY_PID=$REGISTRY_DIR/registry.pid
REGISTRY_LOG=$REGISTRY_DIR/registry.log
# HTTP (the APIs) and the Quarkus management interface (health, metrics), both on loopback.
REGISTRY_PORT=19081
REGISTRY_MANAGEMENT_PORT=19082
# The Confluent-compatible API, what the relay's schema registry client speaks.
REGISTRY_URL=http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7
REGISTRY_READY_TIMEOUT=${REGISTRY_READY_TIMEOUT:-90}

# ---------------------------------------------------------------- locking

# Serialise state-changing verbs of one checkout (tests may call kafka-stop while
# another shell runs up). fd 9 is closed for every daemon we start.
take_lock() { lock_fd9 "$STACK/.lock"; }

# ---------------------------------------------------------------- packages

need_postgres() {
	if [ ! -x "$PG_BIN/initdb" ]; then
		log "PostgreSQL $PG_VERSION not found in $PG_BIN: installing"
		apt_install "postgresql-$PG_VERSION" "postgresql-client-$PG_VERSION"
	fi
	[ -x "$PG_BIN/initdb" ] || die "$PG_BIN/initdb still missing after install"
	if is_root && ! id postgres >/dev/null 2>&1; then
		die "OS user 'postgres' does not exist (it comes with the postgresql-common package)"
	fi
}

# ---------------------------------------------------------------- PostgreSQL

# Resolve PG_DIR: normally <repo>/.stack/pg; if the postgres user cannot reach the
# checkout (e.g. it lives under /root, mode 700), .stack/pg becomes a symlink to a
# directory under /var/tmp keyed by the checkout path.
pg_resolve() {
	if [ -L "$PG_LINK" ]; then
		PG_DIR=$(readlink "$PG_LINK")
	else
		PG_DIR=$PG_LINK
	fi
	PGDATA=$PG_DIR/data
	PG_LOG=$PG_DIR/postgres.log
}

pg_prepare_dir() {
	mkdir -p "$STACK"
	pg_resolve
	mkdir -p "$PG_DIR"
	if is_root; then chown postgres:postgres "$PG_DIR"; fi
	if ! pg_dir_ok "$PG_DIR"; then
		[ ! -L "$PG_LINK" ] || die "postgres user cannot use $PG_DIR (target of $PG_LINK)"
		local alt
		alt=/var/tmp/outbox-relay-pg-$(printf %s "$REPO" | sha1sum | cut -c1-12)
		log "postgres user cannot use $PG_LINK (checkout not reachable or path too long); using $alt"
		rmdir "$PG_LINK" 2>/dev/null || die "$PG_LINK is not empty; run 'scripts/stack.sh clean'"
		mkdir -p "$alt"
		if is_root; then chown postgres:postgres "$alt"; fi
		ln -s "$alt" "$PG_LINK"
		pg_resolve
		pg_dir_ok "$PG_DIR" || die "postgres user cannot use $PG_DIR either"
	fi
}

pg_running() {
	pg_resolve
	[ -f "$PGDATA/postmaster.pid" ] || return 1
	[ -x "$PG_BIN/pg_ctl" ] || return 1
	as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1
}

pg_accepting() {
	[ -x "$PG_BIN/pg_isready" ] || return 1
	"$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -t 2 &&
		[ "$(pg_psql postgres -c 'select 1' 2>/dev/null)" = 1 ]
}

pg_psql() {
	local db=$1
	shift
	PGCONNECT_TIMEOUT=5 "$PG_BIN/psql" -X -q -t -A -v ON_ERROR_STOP=1 \
		-h 127.0.0.1 -p "$PG_PORT" -U postgres -d "$db" "$@"
}

pg_write_config() {
	local conf=$PGDATA/outbox-relay.conf tmp
	tmp=$(mktemp)
	{
		echo "# Written by scripts/stack.sh on every start; included from postgresql.conf."
		pg_relay_settings "$PG_PORT" "$PG_DIR"
	} >"$tmp"
	PG_CONFIG_CHANGED=0
	if ! cmp -s "$tmp" "$conf"; then
		PG_CONFIG_CHANGED=1
		cp "$tmp" "$conf"
		chmod 600 "$conf"
		if is_root; then chown postgres:postgres "$conf"; fi
	fi
	rm -f "$tmp"
	if ! grep -q "^include_if_exists = 'outbox-relay.conf'" "$PGDATA/postgresql.conf"; then
		printf "\n# outbox-relay stack settings (scripts/stack.sh)\ninclude_if_exists = 'outbox-relay.conf'\n" \
			>>"$PGDATA/postgresql.conf"
		PG_CONFIG_CHANGED=1
	fi
}

pg_init() {
	need_postgres
	pg_prepare_dir
	pg_initdb "$PG_BIN/initdb" "$PGDATA" "$PG_DIR/initdb.log"
	pg_write_config
}

pg_wait_ready() {
	local deadline=$((SECONDS + 60))
	until pg_accepting; do
		if [ $SECONDS -ge $deadline ]; then
			tail_log "$PG_LOG" 40
			die "PostgreSQL not ready on 127.0.0.1:$PG_PORT after 60 s"
		fi
		sleep 0.5
	done
	if [ "$(pg_psql postgres -c "select 1 from pg_database where datname = '$PG_DB'")" != 1 ]; then
		log "creating database $PG_DB"
		pg_psql postgres -c "create database $PG_DB" >/dev/null
	fi
	[ "$(pg_psql "$PG_DB" -c 'show wal_level')" = logical ] || die "wal_level is not logical"
}

pg_start() {
	pg_init
	if pg_running; then
		if [ "$PG_CONFIG_CHANGED" = 1 ]; then
			log "PostgreSQL config changed: restarting"
			pg_stop fast
		else
			pg_wait_ready
			log "PostgreSQL already up on 127.0.0.1:$PG_PORT"
			return 0
		fi
	fi
	log "starting PostgreSQL on 127.0.0.1:$PG_PORT (log: $PG_LOG)"
	as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$PG_LOG" -w -t 60 start >/dev/null 9>&- || {
		tail_log "$PG_LOG" 40
		die "pg_ctl start failed"
	}
	pg_wait_ready
	log "PostgreSQL up"
}

pg_stop() {
	pg_resolve
	pg_ctl_stop pg_running "$PG_BIN/pg_ctl" "$PGDATA" "${1:-fast}" PostgreSQL
}

# ---------------------------------------------------------------- Kafka

kafka_pid() {
	local pid=""
	if [ -f "$KAFKA_PID" ]; then
		pid=$(cat "$KAFKA_PID" 2>/dev/null || true)
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
			tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "kafka.Kafka $KAFKA_PROPS"; then
			echo "$pid"
			return 0
		fi
	fi
	# pid file lost or stale: look for a broker of this checkout by its exact config path
	pid=$(pgrep -f -- "kafka.Kafka $KAFKA_PROPS" | head -n1 || true)
	[ -n "$pid" ] || return 1
	echo "$pid" >"$KAFKA_PID" 2>/dev/null || true
	echo "$pid"
}

kafka_port_open() { port_open "$KAFKA_PORT"; }

# kafka_render: the broker config this checkout wants, on stdout.
kafka_render() {
	sed "s#@KAFKA_DATA_DIR@#$KAFKA_DATA#g" "$REPO/scripts/kafka/server.properties.tmpl"
}

# kafka_config_changed: the running broker was started from a config that differs from
# what the template renders now (it reads $KAFKA_PROPS only at start).
kafka_config_changed() {
	! kafka_render | cmp -s - "$KAFKA_PROPS"
}

kafka_prepare() {
	kafka_jars
	mkdir -p "$KAFKA_DATA"
	kafka_render >"$KAFKA_PROPS"
	if [ ! -f "$KAFKA_DATA/meta.properties" ]; then
		if [ ! -s "$KAFKA_DIR/cluster.id" ]; then
			kafka_java kafka.tools.StorageTool random-uuid >"$KAFKA_DIR/cluster.id"
		fi
		log "formatting Kafka storage (cluster id $(cat "$KAFKA_DIR/cluster.id"))"
		kafka_java kafka.tools.StorageTool format -t "$(cat "$KAFKA_DIR/cluster.id")" \
			-c "$KAFKA_PROPS" --ignore-formatted >"$KAFKA_DIR/format.log" 2>&1 || {
			cat "$KAFKA_DIR/format.log" >&2
			die "kafka storage format failed"
		}
	fi
}

kafka_wait_ready() {
	local pid=$1 deadline=$((SECONDS + KAFKA_READY_TIMEOUT))
	while :; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail_log "$KAFKA_DIR/kafka.out" 20
			tail_log "$KAFKA_DIR/server.log" 60
			die "Kafka broker (pid $pid) exited during startup"
		fi
		if kafka_port_open &&
			timeout 30 java -cp "$KAFKA_LIBS/*" "$KAFKA_TOOLS_LOGGING" \
				org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA_BROKERS" --list \
				>/dev/null 2>&1; then
			return 0
		fi
		if [ $SECONDS -ge $deadline ]; then
			tail_log "$KAFKA_DIR/server.log" 60
			die "Kafka not ready on $KAFKA_BROKERS after $KAFKA_READY_TIMEOUT s"
		fi
		sleep 1
	done
}

kafka_start() {
	local pid
	if pid=$(kafka_pid); then
		if kafka_config_changed; then
			log "Kafka config changed (scripts/kafka/server.properties.tmpl): restarting"
			kafka_stop
		else
			kafka_wait_ready "$pid"
			log "Kafka already up on $KAFKA_BROKERS (pid $pid)"
			return 0
		fi
	fi
	kafka_prepare
	local port
	for port in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_PROXIED_PORT"; do
		if port_open "$port"; then
			die "port 127.0.0.1:$port is already in use by a process that is not this checkout's broker"
		fi
	done
	log "starting Kafka $KAFKA_VERSION on $KAFKA_BROKERS (log: $KAFKA_DIR/server.log)"
	rm -f "$KAFKA_PID"
	# setsid: the broker outlives the calling shell/job; the inner shell records its own
	# pid and execs java, so the pid file holds the JVM's pid.
	# shellcheck disable=SC2016 # expanded by the inner shell
	KAFKA_PID="$KAFKA_PID" setsid nohup bash -c 'echo $$ >"$KAFKA_PID"; exec "$@"' kafka \
		java -Xms256m -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
		-Djava.awt.headless=true -Dkafka.logs.dir="$KAFKA_DIR" \
		"$KAFKA_SERVER_LOGGING" -cp "$KAFKA_LIBS/*" kafka.Kafka "$KAFKA_PROPS" \
		>>"$KAFKA_DIR/kafka.out" 2>&1 </dev/null 9>&- &
	local _
	for _ in $(seq 50); do
		[ -s "$KAFKA_PID" ] && break
		sleep 0.1
	done
	pid=$(cat "$KAFKA_PID" 2>/dev/null) || die "Kafka did not start (see $KAFKA_DIR/kafka.out)"
	kafka_wait_ready "$pid"
	log "Kafka up (pid $pid)"
}

kafka_stop() {
	local pid
	if ! pid=$(kafka_pid); then
		rm -f "$KAFKA_PID"
		log "Kafka already down"
		return 0
	fi
	log "stopping Kafka (pid $pid, SIGTERM)"
	kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
	while kill -0 "$pid" 2>/dev/null; do
		if [ $SECONDS -ge $deadline ]; then
			log "Kafka still running after $KAFKA_STOP_TIMEOUT s: SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.5
			deadline=$((SECONDS + 10))
			while kill -0 "$pid" 2>/dev/null; do
				[ $SECONDS -lt $deadline ] || die "Kafka pid $pid survived SIGKILL"
				sleep 0.2
			done
			break
		fi
		sleep 0.2
	done
	rm -f "$KAFKA_PID"
	log "Kafka stopped"
}

# ---------------------------------------------------------------- Apicurio Registry

# registry_pid: the pid of this checkout's registry, found by the system property that
# names its directory (the pid file may be stale after a reboot).
registry_pid() {
	local pid="" mark="-Doutbox.relay.registry=$REGISTRY_DIR"
	if [ -f "$REGISTRY_PID" ]; then
		pid=$(cat "$REGISTRY_PID" 2>/dev/null || true)
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
			tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "$mark"; then
			echo "$pid"
			return 0
		fi
	fi
	pid=$(pgrep -f -- "$mark " | head -n1 || true)
	[ -n "$pid" ] || return 1
	echo "$pid" >"$REGISTRY_PID" 2>/dev/null || true
	echo "$pid"
}

# registry_ready: the Confluent API answers (the in-memory storage is up then).
registry_ready() {
	curl -fsS -m 5 -o /dev/null "$REGISTRY_URL/subjects" 2>/dev/null
}

registry_start() {
	local pid
	if pid=$(registry_pid); then
		registry_wait_ready "$pid"
		log "Apicurio Registry already up on $REGISTRY_URL (pid $pid)"
		return 0
	fi
	registry_java
	registry_fetch
	command -v curl >/dev/null 2>&1 || apt_install curl
	local port
	for port in "$REGISTRY_PORT" "$REGISTRY_MANAGEMENT_PORT"; do
		if port_open "$port"; then
			die "port 127.0.0.1:$port is already in use by a process that is not this checkout's registry"
		fi
	done
	mkdir -p "$REGISTRY_DIR"
	rm -f "$REGISTRY_PID"
	log "starting Apicurio Registry $REGISTRY_VERSION on $REGISTRY_URL with $REGISTRY_JAVA (log: $REGISTRY_LOG)"
	local t0=$SECONDS
	# In-memory storage (the default): a restart forgets every schema, as tests want.
	# The working directory is REGISTRY_DIR: Quarkus may write there, never into the cache.
	# shellcheck disable=SC2016 # expanded by the inner shell
	(cd "$REGISTRY_DIR" && REGISTRY_PID="$REGISTRY_PID" exec setsid nohup bash -c 'echo $$ >"$REGISTRY_PID"; exec "$@"' registry \
		"$REGISTRY_JAVA" -Xms64m -Xmx512m -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
		"-Doutbox.relay.registry=$REGISTRY_DIR" \
		-Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REGISTRY_PORT" \
		-Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$REGISTRY_MANAGEMENT_PORT" \
		-jar "$REGISTRY_HOME/quarkus-run.jar" >>"$REGISTRY_LOG" 2>&1 </dev/null) 9>&- &
	local _
	for _ in $(seq 50); do
		[ -s "$REGISTRY_PID" ] && break
		sleep 0.1
	done
	pid=$(cat "$REGISTRY_PID" 2>/dev/null) || die "Apicurio Registry did not start (see $REGISTRY_LOG)"
	registry_wait_ready "$pid"
	log "Apicurio Registry up in $((SECONDS - t0)) s (pid $pid)"
}

registry_wait_ready() {
	local pid=$1 deadline=$((SECONDS + REGISTRY_READY_TIMEOUT))
	until registry_ready; do
		if ! kill -0 "$pid" 2>/dev/null; then
			tail_log "$REGISTRY_LOG" 40
			die "Apicurio Registry (pid $pid) exited during startup"
		fi
		if [ $SECONDS -ge $deadline ]; then
			tail_log "$REGISTRY_LOG" 40
			die "Apicurio Registry not ready on $REGISTRY_URL after $REGISTRY_READY_TIMEOUT s"
		fi
		sleep 0.5
	done
}

registry_stop() {
	local pid
	if ! pid=$(registry_pid); then
		rm -f "$REGISTRY_PID"
		log "Apicurio Registry already down"
		return 0
	fi
	log "stopping Apicurio Registry (pid $pid, SIGTERM)"
	kill -TERM "$pid" 2>/dev/null || true
	local deadline=$((SECONDS + 20))
	while kill -0 "$pid" 2>/dev/null; do
		if [ $SECONDS -ge $deadline ]; then
			log "Apicurio Registry still running after 20 s: SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.5
			deadline=$((SECONDS + 10))
			while kill -0 "$pid" 2>/dev/null; do
				[ $SECONDS -lt $deadline ] || die "Apicurio Registry pid $pid survived SIGKILL"
				sleep 0.2
			done
			break
		fi
		sleep 0.2
	done
	rm -f "$REGISTRY_PID"
	log "Apicurio Registry stopped"
}

# ---------------------------------------------------------------- verbs

cmd_status() {
	local pid
	if pg_accepting && pg_running; then
		echo "postgres: up   127.0.0.1:$PG_PORT db=$PG_DB data=$PGDATA"
	elif pg_running; then
		echo "postgres: starting (process running, not accepting queries) data=$PGDATA"
	else
		echo "postgres: down"
	fi
	if pid=$(kafka_pid); then
		if kafka_port_open; then
			echo "kafka:    up   $KAFKA_BROKERS pid=$pid data=$KAFKA_DATA proxied=127.0.0.1:$KAFKA_PROXIED_PORT (advertised 127.0.0.1:$KAFKA_PROXIED_ADVERTISED_PORT)"
			if kafka_config_changed; then
				echo "kafka:    config changed since start; 'scripts/stack.sh up' restarts it"
			fi
		else
			echo "kafka:    starting (pid=$pid, port $KAFKA_PORT closed)"
		fi
	else
		echo "kafka:    down"
	fi
	if pid=$(registry_pid); then
		if registry_ready; then
			echo "registry: up   $REGISTRY_URL pid=$pid management=127.0.0.1:$REGISTRY_MANAGEMENT_PORT (Apicurio $REGISTRY_VERSION, in memory)"
		else
			echo "registry: starting (pid=$pid, $REGISTRY_URL not answering)"
		fi
	else
		echo "registry: down"
	fi
}

cmd_env() {
	echo "export OUTBOX_RELAY_DATABASE_URL='$DATABASE_URL'"
	echo "export OUTBOX_RELAY_KAFKA_BROKERS='$KAFKA_BROKERS'"
	# In-process package tests (relay, checkpoint, internal/...) run against
	# the stack only when these are set, the way pgx's tests gate on
	# PGX_TEST_DATABASE: a plain `go test ./...` never touches a database
	# named by the relay's own OUTBOX_RELAY_DATABASE_URL.
	echo "export OUTBOX_RELAY_TEST_DATABASE_URL='$DATABASE_URL'"
	echo "export OUTBOX_RELAY_TEST_KAFKA_BROKERS='$KAFKA_BROKERS'"
	# The registry's Confluent-compatible API, for tests only (no flag reads it yet). Not
	# OUTBOX_RELAY_*: the relay refuses such a variable that no flag or NotFlagEnv knows.
	echo "export TEST_SCHEMA_REGISTRY_URL='$REGISTRY_URL'"
}

usage() { print_usage 12; }

main() {
	local verb=${1:-}
	[ -n "$verb" ] || usage
	shift
	case $verb in
	up)
		take_lock
		local t0=$SECONDS
		pg_start
		kafka_start
		registry_start
		log "stack up in $((SECONDS - t0)) s"
		;;
	down)
		take_lock
		registry_stop
		kafka_stop
		pg_stop fast
		;;
	clean)
		take_lock
		registry_stop
		kafka_stop
		pg_stop fast
		pg_resolve
		if [ -L "$PG_LINK" ]; then rm -rf "$PG_DIR"; fi
		rm -rf "$PG_LINK" "$KAFKA_DIR" "$REGISTRY_DIR"
		find "$STACK" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
		rm -rf "$STACK"
		log "removed $STACK"
		;;
	status) pg_resolve && cmd_status ;;
	env) cmd_env ;;
	pg-start) take_lock && pg_start ;;
	pg-stop) take_lock && pg_stop "${1:-fast}" ;;
	pg-restart) take_lock && pg_stop fast && pg_start ;;
	pg-crash) take_lock && pg_stop immediate && pg_start ;;
	kafka-start) take_lock && kafka_start ;;
	kafka-stop) take_lock && kafka_stop ;;
	registry-start) take_lock && registry_start ;;
	registry-stop) take_lock && registry_stop ;;
	kafka-class)
		[ $# -ge 1 ] || die "usage: scripts/stack.sh kafka-class CLASS [ARGS...]"
		kafka_class_exec "$@"
		;;
	-h | --help | help) usage ;;
	*)
		log "unknown verb: $verb"
		usage
		;;
	esac
}

main "$@"
