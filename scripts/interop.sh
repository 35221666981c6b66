#!/usr/bin/env bash
# The relay beside real Debezium (make interop; not part of make test): Kafka Connect
# standalone with Debezium's PostgreSQL connector and Outbox Event Router, and
# `outbox-relay run --record-format debezium`, each on its own slot of the same outbox
# table; their records compared one for one, and both drains measured (docs/debezium-interop.md).
#
#   scripts/interop.sh fetch          # fetch the Debezium and Connect jars (cached), print their directory
#   scripts/interop.sh classpath      # print the Connect classpath
#   scripts/interop.sh run [ARGS...]  # fetch, then the interop program (interop/debezium) with ARGS
#   scripts/interop.sh schemas        # the registry formats read by Java (issue 48), see below
#
# `schemas` is the outside check of the avro, protobuf and json-schema formats: the relay's
# records of each, decoded by Apache Avro's and protobuf-java's own readers
# (interop/schemas/SchemaDecode.java, jars by scripts/schemacheck.sh), every field equal to
# the row's payload. It runs the integration test that does exactly that,
# TestRegistryJavaDecode (integration/registry_java_test.go), against the stack and its
# Apicurio Registry, each started if it does not answer; it fails if the test is skipped.
#
# The jars come from Maven, as scripts/stack.sh fetches Kafka's, into
# ${OUTBOX_RELAY_CACHE:-$HOME/.cache/outbox-relay}/debezium-<version>-connect-<version>/libs.
# `run` starts the stack if PostgreSQL or Kafka does not answer, needs bin/outbox-relay
# (make build), keeps its logs in .stack/interop/<time> (the last 10 runs), and never
# leaves the Connect JVM behind: the program stops it with SIGTERM (SIGKILL after 60 s),
# and this script's EXIT trap kills a JVM whose pid file is still there. The program drops
# its slots, publications, schema and topics itself; if it was killed before, the trap
# drops them (run.id names them).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

# Debezium 3.6.1 is built against Kafka 4.3: with connect-runtime 4.4.0 the task dies at
# start (ClassNotFoundException: org.apache.kafka.common.utils.Sanitizer). Debezium pulls
# slf4j-api 1.7, which does not see the log4j-slf4j2-impl binding: pin slf4j-api 2.x.
DEBEZIUM_VERSION=3.6.1.Final
CONNECT_VERSION=4.3.0
SLF4J_VERSION=2.0.17
LOG4J_VERSION=2.24.3
CACHE=${OUTBOX_RELAY_CACHE:-${HOME:-/root}/.cache/outbox-relay}
DBZ_HOME=$CACHE/debezium-$DEBEZIUM_VERSION-connect-$CONNECT_VERSION
DBZ_LIBS=$DBZ_HOME/libs
DBZ_MARKER=$DBZ_LIBS/.outbox-relay-complete

dbz_pom() {
	cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by outbox-relay scripts/interop.sh: Debezium $DEBEZIUM_VERSION (PostgreSQL connector, Outbox Event Router) on Kafka Connect $CONNECT_VERSION. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.outbox-relay</groupId>
  <artifactId>debezium-libs</artifactId>
  <version>$DEBEZIUM_VERSION-$CONNECT_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>io.debezium</groupId><artifactId>debezium-connector-postgres</artifactId><version>$DEBEZIUM_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId><version>$CONNECT_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>connect-json</artifactId><version>$CONNECT_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-api</artifactId><version>$SLF4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j2-impl</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$LOG4J_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-api</artifactId><version>$LOG4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
}

need_java() {
	command -v java >/dev/null 2>&1 || apt_install openjdk-17-jre-headless
}

# dbz_jars: the jars in $DBZ_LIBS, fetched once per pom (a marker holds the pom's hash).
dbz_jars() {
	need_java
	local want
	want=$(dbz_pom | sha1sum | cut -c1-40)
	if [ -f "$DBZ_MARKER" ] && [ "$(cat "$DBZ_MARKER")" = "$want" ]; then
		return 0
	fi
	mkdir -p "$DBZ_HOME"
	(
		exec 8>"$DBZ_HOME/.lock"
		flock -w 900 8 || die "could not lock $DBZ_HOME/.lock"
		if [ -f "$DBZ_MARKER" ] && [ "$(cat "$DBZ_MARKER")" = "$want" ]; then
			exit 0
		fi
		command -v mvn >/dev/null 2>&1 || apt_install maven
		log "fetching Debezium $DEBEZIUM_VERSION and Kafka Connect $CONNECT_VERSION jars with Maven into $DBZ_LIBS"
		dbz_pom >"$DBZ_HOME/pom.xml"
		local tmp=$DBZ_HOME/libs.tmp.$$
		rm -rf "$tmp"
		local t0=$SECONDS
		mvn -q -B -Dstyle.color=never -f "$DBZ_HOME/pom.xml" dependency:copy-dependencies \
			-DoutputDirectory="$tmp" -DincludeScope=runtime 8>&- ||
			die "mvn dependency:copy-dependencies failed"
		local j
		for j in "debezium-connector-postgres-$DEBEZIUM_VERSION.jar" "debezium-connect-plugins-$DEBEZIUM_VERSION.jar" \
			"connect-runtime-$CONNECT_VERSION.jar" "connect-json-$CONNECT_VERSION.jar" "connect-transforms-$CONNECT_VERSION.jar" \
			"kafka-clients-$CONNECT_VERSION.jar" "slf4j-api-$SLF4J_VERSION.jar" "log4j-slf4j2-impl-$LOG4J_VERSION.jar"; do
			[ -f "$tmp/$j" ] || die "Maven did not deliver $j"
		done
		# One slf4j-api only: the 2.x pinned above (Maven's nearest-wins already picks it).
		if ls "$tmp"/slf4j-api-1.* >/dev/null 2>&1; then
			die "an slf4j-api 1.x jar is on the classpath: $(ls "$tmp"/slf4j-api-1.*)"
		fi
		rm -rf "$DBZ_LIBS"
		mv "$tmp" "$DBZ_LIBS"
		echo "$want" >"$DBZ_MARKER"
		log "fetched $(find "$DBZ_LIBS" -name '*.jar' | wc -l) jars in $((SECONDS - t0)) s"
	)
}

# stack_answers: PostgreSQL and Kafka of the stack answer (a stack started from another
# checkout answers at the same addresses).
stack_answers() {
	local b=${OUTBOX_RELAY_KAFKA_BROKERS%%,*}
	pg_isready -q -d "$OUTBOX_RELAY_DATABASE_URL" 2>/dev/null &&
		timeout 2 bash -c "exec 3<>/dev/tcp/${b%:*}/${b##*:}" 2>/dev/null
}

LOG_DIR=
PID_FILE=

# stop_jvm: the EXIT trap. The program stops Connect itself; this catches a JVM left by a
# program that was killed: the pid from the pid file, if it still is our ConnectStandalone.
stop_jvm() {
	[ -n "$PID_FILE" ] && [ -f "$PID_FILE" ] || return 0
	local pid
	pid=$(cat "$PID_FILE" 2>/dev/null || true)
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
		tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "ConnectStandalone $LOG_DIR/"; then
		log "Connect JVM (pid $pid) still running: SIGTERM"
		kill -TERM "$pid" 2>/dev/null || true
		local deadline=$((SECONDS + 60))
		while kill -0 "$pid" 2>/dev/null; do
			if [ $SECONDS -ge $deadline ]; then
				log "Connect JVM (pid $pid) still running after 60 s: SIGKILL"
				kill -KILL "$pid" 2>/dev/null || true
				break
			fi
			sleep 0.5
		done
	fi
	rm -f "$PID_FILE"
}

# drop_leftovers: what a killed program did not clean up: the slots, publications and
# schema of the run id in $LOG_DIR/run.id, and its topics (all carry the id).
drop_leftovers() {
	[ -n "$LOG_DIR" ] && [ -f "$LOG_DIR/run.id" ] || return 0
	local id
	id=$(tr -dc 'a-z0-9' <"$LOG_DIR/run.id")
	[ ${#id} -eq 7 ] || return 0
	log "run $id did not clean up: dropping its slots, publications, schema and topics"
	psql -X -q -v ON_ERROR_STOP=0 -d "$OUTBOX_RELAY_DATABASE_URL" >/dev/null 2>&1 <<SQL || true
SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name LIKE '${id}\_%' AND active_pid IS NOT NULL;
SELECT pg_sleep(1);
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE '${id}\_%';
SELECT format('DROP PUBLICATION %I', pubname) FROM pg_publication WHERE pubname LIKE '${id}\_%' \gexec
DROP SCHEMA IF EXISTS interop_${id} CASCADE;
SQL
	KAFKA_CLASS_JAVA_OPTS=-Xmx256m "$REPO/scripts/stack.sh" kafka-class org.apache.kafka.tools.TopicCommand \
		--bootstrap-server "${OUTBOX_RELAY_KAFKA_BROKERS%%,*}" --delete --topic ".*\\.${id}-.*" >/dev/null 2>&1 || true
	rm -f "$LOG_DIR/run.id"
}

on_exit() {
	stop_jvm
	drop_leftovers
	[ -z "$LOG_DIR" ] || rm -f "$LOG_DIR/debezium-interop"
}

cmd_run() {
	dbz_jars
	eval "$("$REPO/scripts/stack.sh" env)"
	if ! stack_answers; then
		"$REPO/scripts/stack.sh" up
	fi
	local relay=$REPO/bin/outbox-relay
	[ -x "$relay" ] || die "$relay is missing: run make build (make interop does)"
	# The logs of the last 10 runs are kept.
	if [ -d "$REPO/.stack/interop" ]; then
		find "$REPO/.stack/interop" -mindepth 1 -maxdepth 1 -type d -name '20*' | sort | head -n -9 | xargs -r rm -rf
	fi
	LOG_DIR=$REPO/.stack/interop/$(date -u +%Y%m%dT%H%M%SZ)
	PID_FILE=$LOG_DIR/connect.pid
	mkdir -p "$LOG_DIR"
	trap on_exit EXIT
	trap 'exit 130' INT TERM
	log "building interop/debezium"
	(cd "$REPO/interop/debezium" && go build -o "$LOG_DIR/debezium-interop" .)
	local rc=0
	(cd "$REPO" && "$LOG_DIR/debezium-interop" \
		-relay "$relay" \
		-connect-libs "$DBZ_LIBS" \
		-log-dir "$LOG_DIR" \
		-pid-file "$PID_FILE" \
		-report docs/benchmarks.md \
		-formats-doc docs/formats.md \
		-interop-doc docs/debezium-interop.md \
		-versions "Debezium $DEBEZIUM_VERSION, Kafka Connect $CONNECT_VERSION" \
		"$@") || rc=$?
	return $rc
}

# registry_answers: the stack's schema registry (TEST_SCHEMA_REGISTRY_URL) answers; one
# started from another checkout answers at the same address.
registry_answers() {
	curl -fsS -m 5 -o /dev/null "$TEST_SCHEMA_REGISTRY_URL/subjects" 2>/dev/null
}

# cmd_schemas: TestRegistryJavaDecode, the Java decoders on the relay's records of the three
# registry formats. The test writes the rows, runs its own build of the relay, and hands
# the records to scripts/schemacheck.sh; this only makes sure the stack, the registry and
# the jars are there, and that the test ran rather than skipped.
cmd_schemas() {
	eval "$("$REPO/scripts/stack.sh" env)"
	if ! stack_answers; then
		"$REPO/scripts/stack.sh" up
	fi
	if ! registry_answers; then
		"$REPO/scripts/stack.sh" registry-start
	fi
	# Fetched before the test's clock starts (the first time Maven takes a while).
	"$REPO/scripts/schemacheck.sh" classpath >/dev/null
	log "the registry formats decoded by Java: TestRegistryJavaDecode against $TEST_SCHEMA_REGISTRY_URL"
	local out rc=0
	out=$(mktemp)
	(cd "$REPO" && go test -tags integration -count=1 -timeout 10m -v -run '^TestRegistryJavaDecode$' ./integration/) >"$out" 2>&1 || rc=$?
	# The verdicts and the test's own lines (each subtest logs one decoded record), not the relay's logs.
	grep -E '^\s*(--- |=== RUN|PASS|FAIL|ok |registry_java_test\.go)|^\s+registry_java_test\.go' "$out" || true
	if [ "$rc" -ne 0 ]; then
		tail -n 40 "$out" >&2
		rm -f "$out"
		die "TestRegistryJavaDecode failed (exit $rc)"
	fi
	local f
	for f in avro protobuf json-schema; do
		grep -q -- "--- PASS: TestRegistryJavaDecode/$f " "$out" || {
			rm -f "$out"
			die "TestRegistryJavaDecode/$f did not pass (skipped?)"
		}
	done
	rm -f "$out"
	log "the registry formats decoded by Java: avro, protobuf and json-schema, every field equal to the row's payload"
}

usage() { print_usage 26; }

main() {
	local verb=${1:-}
	[ -n "$verb" ] || usage
	shift
	case $verb in
	fetch)
		dbz_jars
		echo "$DBZ_LIBS"
		;;
	classpath)
		dbz_jars
		echo "$DBZ_LIBS/*"
		;;
	run) cmd_run "$@" ;;
	schemas) cmd_schemas ;;
	-h | --help | help) usage ;;
	*)
		log "unknown verb: $verb"
		usage
		;;
	esac
}

main "$@"
