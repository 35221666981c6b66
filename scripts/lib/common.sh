# shellcheck shell=bash
# Helpers shared by scripts/*.sh (sourced, not executed).

log() { printf '[stack %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}
is_root() { [ "$(id -u)" -eq 0 ]; }

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# tail_log FILE [LINES]: print the end of a log file to stderr, if it exists.
tail_log() {
	local f=$1 n=${2:-50}
	if [ -f "$f" ]; then
		printf -- '----- last %s lines of %s -----\n' "$n" "$f" >&2
		tail -n "$n" "$f" >&2 || true
		printf -- '----- end of %s -----\n' "$f" >&2
	fi
}

# apt_install PKG...: apt-get update (once per process) then install, non-interactively.
APT_UPDATED=${APT_UPDATED:-0}
apt_install() {
	is_root || die "need root to apt-get install $*"
	if [ "$APT_UPDATED" != 1 ]; then
		log "apt-get update"
		apt-get update -q >&2
		APT_UPDATED=1
		export APT_UPDATED
	fi
	log "apt-get install $*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2
}

# Run a command as the OS user owning the cluster (postgres refuses to run as root).
as_pg() {
	if is_root; then
		(cd / && runuser -u postgres -- "$@")
	else
		(cd / && "$@")
	fi
}

# pg_dir_ok DIR: the postgres user can write DIR and the socket path fits (107 bytes).
pg_dir_ok() {
	[ $((${#1} + 24)) -lt 107 ] || return 1
	as_pg test -w "$1" -a -x "$1"
}

# pg_relay_settings PORT SOCKET_DIR: the postgresql.conf settings every test cluster of the
# relay runs with (logical decoding, slots, real durability), for scripts/stack.sh and
# scripts/pgversions.sh alike.
pg_relay_settings() {
	cat <<EOF
port = $1
listen_addresses = '127.0.0.1'
unix_socket_directories = '$2'
max_connections = 200
shared_buffers = 256MB
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
wal_sender_timeout = 60s
max_slot_wal_keep_size = 4GB
# crash tests need real durability: never fsync = off
fsync = on
logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%m [%p] %q%u@%d '
log_timezone = 'UTC'
timezone = 'UTC'
EOF
}

# print_usage LAST: the calling script's header comment (lines 2..LAST) without the
# leading '# ', on stderr, then exit 2.
print_usage() {
	sed -n "2,${1}p" "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

# lock_fd9 FILE: hold an exclusive lock on FILE through fd 9 until the script exits, so
# state-changing verbs of one checkout run one at a time. Daemons must be started 9>&-.
lock_fd9() {
	mkdir -p "$(dirname "$1")"
	exec 9>"$1"
	flock -w 600 9 || die "could not lock $1"
}

# pg_ctl_stop RUNNING PG_CTL PGDATA MODE WHAT: stop a cluster with pg_ctl -m MODE unless
# the predicate RUNNING says it is already down; WHAT names it in the log.
pg_ctl_stop() {
	local running=$1 pg_ctl=$2 data=$3 mode=$4 what=$5
	case $mode in fast | immediate | smart) ;; *) die "stop mode must be fast|immediate|smart" ;; esac
	if ! "$running"; then
		log "$what already down"
		return 0
	fi
	log "stopping $what (-m $mode)"
	as_pg "$pg_ctl" -D "$data" -m "$mode" -w -t 60 stop >/dev/null
}

# pg_initdb INITDB PGDATA LOG: create the cluster once (superuser postgres, trust auth on
# loopback, UTF8, C.UTF-8), the same way for every version; initdb's output goes to LOG.
pg_initdb() {
	local initdb=$1 data=$2 out=$3
	[ ! -f "$data/PG_VERSION" ] || return 0
	log "initdb $data"
	as_pg "$initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$out" 2>&1 || {
		cat "$out" >&2
		die "initdb failed"
	}
}

# ---------------------------------------------------------------- Kafka from Maven jars
# Shared by scripts/stack.sh (the single broker) and scripts/kafkacluster.sh (a cluster).

need_java() {
	command -v java >/dev/null 2>&1 || apt_install openjdk-17-jre-headless
}

# kafka_use_version VERSION: select a Kafka version. Sets KAFKA_VERSION, KAFKA_HOME,
# KAFKA_LIBS, KAFKA_MARKER, KAFKA_LOG4J2_VERSION, the java options that point logging at
# scripts/kafka/ (KAFKA_SERVER_LOGGING: server.log in -Dkafka.logs.dir; KAFKA_TOOLS_LOGGING:
# warnings to stderr) and KAFKA_BROKER_VERSIONS_CLASS. Needs REPO.
#   3.9.x logs through slf4j-api 1.7 -> slf4j-reload4j -> reload4j (log4j 1 syntax,
#         log4j.properties); kafka-tools brings both jars, as the distribution ships them.
#   4.x   logs through slf4j-api 1.7 -> log4j-slf4j-impl -> log4j2 (log4j2.xml); the
#         binding is not a dependency of any Kafka artifact, so the pom adds it, at the
#         log4j2 version that version's kafka-tools depends on.
# kafka.Kafka (broker) and kafka.tools.StorageTool (format) are the same in all of them.
# shellcheck disable=SC2034 # the variables are for the scripts that source this file
kafka_use_version() {
	KAFKA_VERSION=$1
	local cache=${OUTBOX_RELAY_CACHE:-${HOME:-/root}/.cache/outbox-relay}
	KAFKA_HOME=$cache/kafka-$KAFKA_VERSION
	KAFKA_LIBS=$KAFKA_HOME/libs
	KAFKA_MARKER=$KAFKA_LIBS/.outbox-relay-complete
	case $KAFKA_VERSION in
	3.9.*) KAFKA_LOG4J2_VERSION= ;;
	4.1.1) KAFKA_LOG4J2_VERSION=2.24.3 ;;
	4.4.0) KAFKA_LOG4J2_VERSION=2.25.5 ;;
	*) die "Kafka $KAFKA_VERSION is not supported (3.9.x, 4.1.1, 4.4.0); for another 4.x add the log4j-core version its kafka-tools depends on (mvn dependency:tree) to kafka_use_version in scripts/lib/common.sh" ;;
	esac
	if [ -n "$KAFKA_LOG4J2_VERSION" ]; then
		KAFKA_SERVER_LOGGING=-Dlog4j2.configurationFile=$REPO/scripts/kafka/log4j2.xml
		KAFKA_TOOLS_LOGGING=-Dlog4j2.configurationFile=$REPO/scripts/kafka/tools-log4j2.xml
		KAFKA_BROKER_VERSIONS_CLASS=org.apache.kafka.tools.BrokerApiVersionsCommand
	else
		KAFKA_SERVER_LOGGING=-Dlog4j.configuration=file:$REPO/scripts/kafka/log4j.properties
		KAFKA_TOOLS_LOGGING=-Dlog4j.configuration=file:$REPO/scripts/kafka/tools-log4j.properties
		KAFKA_BROKER_VERSIONS_CLASS=kafka.admin.BrokerApiVersionsCommand
	fi
}

# kafka_pom: the pom whose runtime dependencies are the broker and tools of KAFKA_VERSION.
# Its sha1 is the cache key of KAFKA_LIBS: changing this text (comments too) re-fetches the
# jars of every version, so the 4.x text stays byte for byte as scripts/stack.sh wrote it.
kafka_pom() {
	cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by outbox-relay scripts/stack.sh: fetches the Kafka $KAFKA_VERSION broker and tools jars. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.outbox-relay</groupId>
  <artifactId>kafka-libs</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
EOF
	if [ -n "$KAFKA_LOG4J2_VERSION" ]; then
		cat <<EOF
    <!-- Kafka 4.x logs through slf4j-api 1.7.36 -> log4j2; the distribution ships log4j-slf4j-impl (the SLF4J 1.x binding). -->
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>$KAFKA_LOG4J2_VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>$KAFKA_LOG4J2_VERSION</version></dependency>
EOF
	else
		echo "    <!-- Kafka 3.x logs through slf4j-api 1.7.36 -> reload4j: kafka-tools brings slf4j-reload4j and reload4j. -->"
	fi
	cat <<EOF
  </dependencies>
</project>
EOF
}

# kafka_jars: fetch KAFKA_VERSION's jars into KAFKA_LIBS with Maven, once (scripts asking
# at the same time wait for the first one's fetch).
kafka_jars() {
	need_java
	local want
	want=$(kafka_pom | sha1sum | cut -c1-40)
	if [ -f "$KAFKA_MARKER" ] && [ "$(cat "$KAFKA_MARKER")" = "$want" ]; then
		return 0
	fi
	mkdir -p "$KAFKA_HOME"
	(
		exec 8>"$KAFKA_HOME/.lock"
		flock -w 900 8 || die "could not lock $KAFKA_HOME/.lock"
		if [ -f "$KAFKA_MARKER" ] && [ "$(cat "$KAFKA_MARKER")" = "$want" ]; then
			exit 0
		fi
		command -v mvn >/dev/null 2>&1 || apt_install maven
		log "fetching Kafka $KAFKA_VERSION jars with Maven into $KAFKA_LIBS"
		kafka_pom >"$KAFKA_HOME/pom.xml"
		local tmp=$KAFKA_HOME/libs.tmp.$$
		rm -rf "$tmp"
		local t0=$SECONDS
		# Maven's output to a file: callers' stdout is for their results (env lines...)
		mvn -q -B -Dstyle.color=never -f "$KAFKA_HOME/pom.xml" dependency:copy-dependencies \
			-DoutputDirectory="$tmp" -DincludeScope=runtime >"$KAFKA_HOME/mvn.log" 2>&1 8>&- || {
			cat "$KAFKA_HOME/mvn.log" >&2
			die "mvn dependency:copy-dependencies failed"
		}
		local j binding=slf4j-reload4j-1.7.36.jar
		[ -z "$KAFKA_LOG4J2_VERSION" ] || binding=log4j-slf4j-impl-$KAFKA_LOG4J2_VERSION.jar
		for j in "kafka_2.13-$KAFKA_VERSION.jar" "kafka-tools-$KAFKA_VERSION.jar" \
			"kafka-clients-$KAFKA_VERSION.jar" "$binding"; do
			[ -f "$tmp/$j" ] || die "Maven did not deliver $j"
		done
		rm -rf "$KAFKA_LIBS"
		mv "$tmp" "$KAFKA_LIBS"
		echo "$want" >"$KAFKA_MARKER"
		log "fetched $(find "$KAFKA_LIBS" -name '*.jar' | wc -l) jars in $((SECONDS - t0)) s"
	)
}

# kafka_java ARGS...: run a short-lived Kafka tool class of KAFKA_VERSION (client compiler
# only and a small serial heap: quicker on a busy machine), its warnings on stderr.
# kafka_java_within SECONDS ARGS...: the same, killed after SECONDS.
kafka_java() { kafka_java_within 0 "$@"; }
kafka_java_within() {
	local t=$1
	shift
	timeout "$t" java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$KAFKA_LIBS/*" \
		"$KAFKA_TOOLS_LOGGING" "$@"
}

# kafka_class_exec CLASS [ARGS...]: the kafka-class verb: fetch the jars if needed, then
# replace the shell with java running CLASS. KAFKA_CLASS_JAVA_OPTS (split on blanks)
# replaces the default -Xmx512m.
kafka_class_exec() {
	kafka_jars
	# shellcheck disable=SC2086
	exec java ${KAFKA_CLASS_JAVA_OPTS:--Xmx512m} -cp "$KAFKA_LIBS/*" "$KAFKA_TOOLS_LOGGING" "$@"
}

# ---------------------------------------------------------------- Java 21+ and Apicurio Registry
# scripts/stack.sh runs Apicurio Registry 3.x, built for Java 21+ (on 17 it dies with
# UnsupportedClassVersionError), while Kafka keeps the machine's default JDK.

# java_major JAVA: the feature version (17, 21, 25…) of the java binary JAVA, from the
# release file beside its bin/ when there is one (no JVM start), else from java -version.
java_major() {
	local java=$1 home v
	home=$(dirname "$(dirname "$java")")
	if [ -f "$home/release" ]; then
		v=$(sed -n 's/^JAVA_VERSION="\(.*\)"$/\1/p' "$home/release")
	fi
	if [ -z "${v:-}" ]; then
		v=$("$java" -version 2>&1 | sed -n 's/.* version "\([^"]*\)".*/\1/p' | head -n1)
	fi
	v=${v#1.} # 1.8.0 -> 8
	v=${v%%[.+-]*}
	case $v in '' | *[!0-9]*) echo 0 ;; *) echo "$v" ;; esac
}

# java_home_min MAJOR: print the JAVA_HOME of a JDK or JRE of version MAJOR or newer.
# JAVA_HOME wins when it qualifies; otherwise the newest of the java on PATH,
# /usr/lib/jvm/* (Debian's and Temurin's packages) and /opt/java/*, /opt/*
# (tarballs, the Temurin images). Nothing found: the versions seen, on stderr, and
# status 1.
java_home_min() {
	local want=$1 best="" best_v=0 seen="" cand java v
	local cands=()
	[ -z "${JAVA_HOME:-}" ] || cands+=("$JAVA_HOME")
	if java=$(command -v java 2>/dev/null); then
		cands+=("$(dirname "$(dirname "$(readlink -f "$java")")")")
	fi
	for cand in /usr/lib/jvm/* /opt/java/* /opt/*; do
		[ -d "$cand" ] && cands+=("$cand")
	done
	for cand in "${cands[@]}"; do
		java=$cand/bin/java
		[ -x "$java" ] || continue
		v=$(java_major "$java")
		seen="$seen $cand ($v)"
		if [ "$cand" = "${JAVA_HOME:-}" ] && [ "$v" -ge "$want" ]; then
			echo "$cand"
			return 0
		fi
		if [ "$v" -ge "$want" ] && [ "$v" -gt "$best_v" ]; then
			best=$cand best_v=$v
		fi
	done
	if [ -n "$best" ]; then
		echo "$best"
		return 0
	fi
	log "no Java $want+ found; seen:${seen:- none}"
	return 1
}

# registry_use_version VERSION: select an Apicurio Registry version. Sets REGISTRY_VERSION,
# REGISTRY_ARTIFACT (Maven coordinates of the Quarkus fast-jar tarball), REGISTRY_HOME
# (where it is unpacked, in the download cache beside Kafka's jars) and REGISTRY_MARKER.
# shellcheck disable=SC2034 # the variables are for the scripts that source this file
registry_use_version() {
	REGISTRY_VERSION=$1
	local cache=${OUTBOX_RELAY_CACHE:-${HOME:-/root}/.cache/outbox-relay}
	REGISTRY_ARTIFACT=io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all
	REGISTRY_HOME=$cache/apicurio-registry-$REGISTRY_VERSION
	REGISTRY_MARKER=$REGISTRY_HOME/.outbox-relay-complete
}

# registry_java: set REGISTRY_JAVA to a java binary of version 21 or newer, or die.
registry_java() {
	local home
	home=$(java_home_min 21) || die "Apicurio Registry $REGISTRY_VERSION needs Java 21 or newer (3.x is built for class file version 65): install a JDK 21+ (a Temurin JDK under /usr/lib/jvm or /opt is found) or set JAVA_HOME to one"
	REGISTRY_JAVA=$home/bin/java
}

# registry_fetch: download REGISTRY_ARTIFACT with Maven (into the local Maven repository)
# and unpack it into REGISTRY_HOME, once (scripts asking at the same time wait for the first
# one's fetch).
registry_fetch() {
	if [ -f "$REGISTRY_MARKER" ] && [ -f "$REGISTRY_HOME/quarkus-run.jar" ]; then
		return 0
	fi
	mkdir -p "$REGISTRY_HOME"
	(
		exec 8>"$REGISTRY_HOME/.lock"
		flock -w 900 8 || die "could not lock $REGISTRY_HOME/.lock"
		if [ -f "$REGISTRY_MARKER" ] && [ -f "$REGISTRY_HOME/quarkus-run.jar" ]; then
			exit 0
		fi
		command -v mvn >/dev/null 2>&1 || apt_install maven
		log "fetching $REGISTRY_ARTIFACT with Maven"
		local tmp=$REGISTRY_HOME/fetch.tmp.$$ t0=$SECONDS
		rm -rf "$tmp"
		mkdir -p "$tmp/app"
		# Maven's output to a file: callers' stdout is for their results (env lines...)
		mvn -q -B -Dstyle.color=never dependency:copy -Dartifact="$REGISTRY_ARTIFACT" \
			-DoutputDirectory="$tmp" >"$REGISTRY_HOME/mvn.log" 2>&1 8>&- || {
			cat "$REGISTRY_HOME/mvn.log" >&2
			rm -rf "$tmp"
			die "mvn dependency:copy $REGISTRY_ARTIFACT failed"
		}
		local tgz=$tmp/apicurio-registry-app-$REGISTRY_VERSION-all.tar.gz
		[ -f "$tgz" ] || die "Maven did not deliver $(basename "$tgz")"
		tar -xzf "$tgz" -C "$tmp/app" || die "cannot unpack $tgz"
		[ -f "$tmp/app/quarkus-run.jar" ] || die "no quarkus-run.jar in $tgz"
		find "$REGISTRY_HOME" -mindepth 1 -maxdepth 1 ! -name .lock ! -name mvn.log ! -name "fetch.tmp.$$" \
			-exec rm -rf {} +
		mv "$tmp/app"/* "$REGISTRY_HOME"/
		rm -rf "$tmp"
		echo "$REGISTRY_ARTIFACT" >"$REGISTRY_MARKER"
		log "Apicurio Registry $REGISTRY_VERSION unpacked in $REGISTRY_HOME in $((SECONDS - t0)) s"
	)
}
