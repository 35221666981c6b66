#!/usr/bin/env bash
# Throwaway Kafka KRaft cluster for outbox-relay's failover tests: 3 nodes (or 1), each a
# combined broker + controller, from the Maven jars like scripts/stack.sh's single broker
# (which it leaves alone). Ports, verbs and settings: docs/design.md ("The local stack").
#
#   scripts/kafkacluster.sh up | down | clean | status | env | controller
#   scripts/kafkacluster.sh kill N | stop N | start N | pause N | resume N | pid N
#   scripts/kafkacluster.sh kafka-class CLASS [ARGS...]  # run a class from the Kafka jars
#   scripts/kafkacluster.sh run CMD [ARGS...]  # up, CMD with env's variables, down + clean
#
#   up          fetch the jars, format (once), start every node that is down, wait until every
#               node answers and the metadata lists all N brokers; a running node is left as is
#   down        SIGTERM every node (SIGCONT first if paused), SIGKILL after 20 s; the last node
#               cannot finish a controlled shutdown without a quorum: SIGKILL 3 s after it is lost
#   clean       down, then delete the cluster directory
#   status      a line per node: node N: up|starting|paused|down pid=PID|- broker=... controller=...
#               then a line: cluster: kafka=VERSION nodes=N broker.session.timeout.ms=6000 ...
#   env         export OUTBOX_RELAY_KAFKA_BROKERS=... and OUTBOX_RELAY_TEST_KAFKA_BROKERS=...
#   controller  the node id of the active controller (the KRaft quorum leader)
#   kill N      SIGKILL node N, wait until it is gone
#   stop N      SIGTERM (controlled shutdown), SIGKILL after 60 s (3 s once no quorum is left)
#   start N     start node N, wait until its broker answers and another node's metadata lists it
#   pause N     SIGSTOP; resume N: SIGCONT; pid N: its pid (exit 1 when down)
#   run CMD     a fresh cluster for one command: up, CMD, then down and clean whatever CMD's
#               outcome; exits with CMD's status. Refuses while the cluster is already up.
#
# Environment: KAFKA_VERSION 4.1.1 (default), 3.9.2 or 4.4.0; KAFKA_NODES 3 (default) or 1;
# KAFKA_CLUSTER_DIR (default <repo>/.stack/cluster-$KAFKA_VERSION-$KAFKA_NODES): each node's
# config, data, server.log and pid in node-N/; KAFKA_READY_TIMEOUT (90 s) bounds up and start;
# KAFKA_NODE_JVM_OPTS replaces the nodes' JVM flags (heap, collector, JIT).
# Node n listens on 127.0.0.1:29n92 (broker) and 29n93 (controller): 29192/29193, 29292/29293,
# 29392/29393; a 1-node cluster uses node 1's. KAFKA_PORT_PREFIX=30 moves a second cluster to
# 30n92/30n93 (and its default directory to cluster-$KAFKA_VERSION-$KAFKA_NODES-p30), so two run
# side by side (make cluster-test's two halves); clusters of one prefix share ports: up and
# start refuse when a port is taken by anything else.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

kafka_use_version "${KAFKA_VERSION:-4.1.1}"
NODES=${KAFKA_NODES:-3}
case $NODES in 1 | 3) ;; *) die "KAFKA_NODES must be 1 or 3, not '$NODES'" ;; esac
PORT_PREFIX=${KAFKA_PORT_PREFIX:-29}
case $PORT_PREFIX in 29 | 30) ;; *) die "KAFKA_PORT_PREFIX must be 29 or 30, not '$PORT_PREFIX'" ;; esac
STACK=$REPO/.stack
DIR_SUFFIX=
[ "$PORT_PREFIX" = 29 ] || DIR_SUFFIX=-p$PORT_PREFIX
DIR=${KAFKA_CLUSTER_DIR:-$STACK/cluster-$KAFKA_VERSION-$NODES$DIR_SUFFIX}
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
MARKER=$DIR/.kafkacluster # what 'clean' checks before it deletes DIR

# Failure detection, in one place: a node killed with -9 is fenced after the session timeout
# (Kafka's default is 9 s). 'status' prints both; tests read them there to bound recovery.
SESSION_TIMEOUT_MS=6000
HEARTBEAT_MS=1000
READY_TIMEOUT=${KAFKA_READY_TIMEOUT:-90}
# The nodes' JVM flags (split on blanks). C1 only and the serial collector start a node with
# less CPU (its JIT competes with the tests' load for the 2 cores): a 3-node cluster is up in
# 8-9 s instead of 12 with C2 and G1. These brokers carry test traffic, not benchmarks (the
# stack's broker, which the benchmarks use, keeps G1 and C2).
NODE_JVM_OPTS=${KAFKA_NODE_JVM_OPTS:--Xms256m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1}
DOWN_TIMEOUT=20 # down: SIGKILL after
STOP_TIMEOUT=60 # stop N: SIGKILL after

broker_port() { echo $((PORT_PREFIX * 1000 + $1 * 100 + 92)); }
controller_port() { echo $((PORT_PREFIX * 1000 + $1 * 100 + 93)); }
node_dir() { echo "$DIR/node-$1"; }

# brokers [NODE...]: the bootstrap list of those nodes (all by default).
brokers() {
	local n list=""
	# shellcheck disable=SC2046
	[ $# -gt 0 ] || set -- $(seq "$NODES")
	for n; do list=$list${list:+,}127.0.0.1:$(broker_port "$n"); done
	echo "$list"
}

voters() {
	local n list=""
	for n in $(seq "$NODES"); do list=$list${list:+,}$n@127.0.0.1:$(controller_port "$n"); done
	echo "$list"
}

take_lock() { lock_fd9 "$STACK/.kafkacluster.lock"; }

check_node_arg() {
	if ! [[ ${1:-} =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ] || [ "$1" -gt "$NODES" ]; then
		die "node must be 1..$NODES (KAFKA_NODES=$NODES), not '${1:-}'"
	fi
}

# ---------------------------------------------------------------- processes

# node_pid N: the pid of node N's JVM, if it runs (a zombie does not).
node_pid() {
	local n=$1 props pid
	props=$(node_dir "$n")/server.properties
	pid=$(cat "$(node_dir "$n")/pid" 2>/dev/null || true)
	if ! { [[ $pid =~ ^[0-9]+$ ]] && is_node_process "$pid" "$props"; }; then
		# pid file lost or stale: look for a JVM started with exactly this config file
		pid=""
		local p
		for p in $(pgrep -f 'kafka\.Kafka ' || true); do
			if is_node_process "$p" "$props"; then
				pid=$p
				echo "$pid" >"$(node_dir "$n")/pid" 2>/dev/null || true
				break
			fi
		done
	fi
	[ -n "$pid" ] || return 1
	echo "$pid"
}

is_node_process() {
	! proc_gone "$1" &&
		tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "kafka.Kafka $2"
}

# proc_state PID: the state letter of /proc/PID/stat (R, S, T when stopped, Z...), or nothing.
proc_state() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	stat=${stat##*) }
	echo "${stat%% *}"
}

# node_state N: up (broker port answers), starting (running, port closed), paused, down.
node_state() {
	local pid
	pid=$(node_pid "$1") || {
		echo down
		return 0
	}
	case $(proc_state "$pid") in
	T | t) echo paused ;;
	*) if port_open "$(broker_port "$1")"; then echo up; else echo starting; fi ;;
	esac
}

# proc_gone PID: PID has exited. A JVM's main thread may be a zombie while its other
# threads still exit (its sockets still open): gone only once the zombie is alone.
proc_gone() {
	[ -d "/proc/$1" ] || return 0
	[ "$(proc_state "$1")" = Z ] && [ "$(find "/proc/$1/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" -le 1 ]
}

# listening PORT: a socket listens on 127.0.0.1:PORT (a stopped or dying process's too).
listening() {
	if command -v ss >/dev/null 2>&1; then
		[ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]
	else
		port_open "$1"
	fi
}

# gone_report PID N: why wait_gone still waits, for its error message.
gone_report() {
	echo "process state '$(proc_state "$1")' wchan '$(cat "/proc/$1/wchan" 2>/dev/null || true)'" \
		"tasks $(find "/proc/$1/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)," \
		"listening: $(ss -Htlnp "( sport = :$(broker_port "$2") or sport = :$(controller_port "$2") )" 2>/dev/null | tr -s ' \n' ' ')"
}

# port_held PID PORT: a socket of PID, or of a process on its way out (no owner shown),
# still listens on PORT. Another process's listener does not count: it is not ours to wait
# for ('up' and 'start' refuse to start on it). Needs ss; without it, no.
port_held() {
	local out
	out=$(ss -Htlnp "sport = :$2" 2>/dev/null) || return 1
	[ -n "$out" ] || return 1
	grep -q "pid=$1," <<<"$out" && return 0
	! grep -q 'pid=' <<<"$out"
}

# wait_gone PID SECONDS [N]: whether PID exited within SECONDS (and closed node N's ports).
wait_gone() {
	local pid=$1 deadline=$((SECONDS + $2)) n=${3:-}
	while ! proc_gone "$pid" ||
		{ [ -n "$n" ] && { port_held "$pid" "$(broker_port "$n")" || port_held "$pid" "$(controller_port "$n")"; }; }; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 0.1
	done
}

# voters_running: how many nodes run, not paused (the quorum's live voters).
voters_running() {
	local n count=0
	for n in $(seq "$NODES"); do
		case $(node_state "$n") in up | starting) count=$((count + 1)) ;; esac
	done
	echo "$count"
}

# signal_stop TIMEOUT N...: SIGTERM the nodes (SIGCONT first: a stopped JVM cannot act on
# it), wait up to TIMEOUT s for all of them, SIGKILL the survivors. A broker's controlled
# shutdown needs the quorum to commit it: once no majority of the nodes runs (the last of
# a cluster going down), the survivors would wait minutes, so they get QUORUMLESS_GRACE s.
QUORUMLESS_GRACE=3
signal_stop() {
	local timeout=$1 n pid
	shift
	local -a pids=() names=()
	for n; do
		pid=$(node_pid "$n") || continue
		log "stopping node $n (pid $pid, SIGTERM)"
		kill -CONT "$pid" 2>/dev/null || true
		kill -TERM "$pid" 2>/dev/null || true
		pids+=("$pid")
		names+=("$n")
	done
	local i left deadline=$((SECONDS + timeout)) quorumless=0 why="after $timeout s"
	while :; do
		left=()
		for i in "${!pids[@]}"; do
			proc_gone "${pids[$i]}" || left+=("$i")
		done
		if [ ${#left[@]} -eq 0 ] || [ $SECONDS -ge $deadline ]; then break; fi
		if [ $quorumless = 0 ] && [ "$NODES" -gt 1 ] && [ $(($(voters_running) * 2)) -le "$NODES" ]; then
			quorumless=1
			if [ $((SECONDS + QUORUMLESS_GRACE)) -lt $deadline ]; then
				deadline=$((SECONDS + QUORUMLESS_GRACE))
				why="$QUORUMLESS_GRACE s after the quorum was lost (no controlled shutdown possible)"
			fi
		fi
		sleep 0.2
	done
	for i in "${!pids[@]}"; do
		if ! proc_gone "${pids[$i]}"; then
			log "node ${names[$i]} still running $why: SIGKILL"
			kill -KILL "${pids[$i]}" 2>/dev/null || true
		fi
		wait_gone "${pids[$i]}" 30 "${names[$i]}" ||
			die "node ${names[$i]} (pid ${pids[$i]}) still there 30 s after SIGKILL: $(gone_report "${pids[$i]}" "${names[$i]}")"
	done
	for n; do rm -f "$(node_dir "$n")/pid"; done
}

# ---------------------------------------------------------------- tools

# tool_out SECONDS CLASS ARGS...: the stdout of an admin tool (one that takes
# --command-config), bounded in time; fails with it. Its requests time out after 2 s, so
# that a paused node (which the kernel still accepts connections for) costs little.
tool_out() {
	local t=$1 class=$2 cfg=$DIR/tools.properties
	shift 2
	[ -f "$cfg" ] || printf 'request.timeout.ms=2000\ndefault.api.timeout.ms=5000\n' >"$cfg"
	kafka_java_within "$t" "$class" --command-config "$cfg" "$@" 2>/dev/null
}

# registered BOOTSTRAP: the live (unfenced) brokers in the metadata of BOOTSTRAP, a line
# each, "ID ok" when it answered the tool's own ApiVersions request, else "ID error".
registered() {
	local out
	out=$(tool_out 30 "$KAFKA_BROKER_VERSIONS_CLASS" --bootstrap-server "$1") || return 1
	# 4.x: "127.0.0.1:29192 (id: 1 rack: null isFenced: false) -> (", 3.9: "... rack: null) -> (",
	# a broker that did not answer: "... -> ERROR: ..."
	sed -n -e 's/^[0-9.]*:[0-9]* (id: \([0-9]*\) .*) -> ERROR.*/\1 error/p' \
		-e 's/^[0-9.]*:[0-9]* (id: \([0-9]*\) .*) -> (.*/\1 ok/p' <<<"$out" | sort -n
}

# ---------------------------------------------------------------- start

cluster_id() {
	local f=$DIR/cluster.id id
	if [ ! -s "$f" ]; then
		# a Kafka Uuid: 16 random bytes in URL-safe base64 without padding, not starting
		# with '-' (what StorageTool random-uuid prints, without starting a JVM)
		id=-
		while [ "${id:0:1}" = - ]; do
			id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
		done
		echo "$id" >"$f"
	fi
	cat "$f"
}

# render N: node N's server.properties, on stdout.
render() {
	local n=$1 rf=$NODES min_isr=2
	[ "$NODES" -gt 1 ] || min_isr=1
	sed -e "s#@KAFKA_VERSION@#$KAFKA_VERSION#g" -e "s#@NODE_ID@#$n#g" -e "s#@NODES@#$NODES#g" \
		-e "s#@VOTERS@#$(voters)#g" -e "s#@BROKER_PORT@#$(broker_port "$n")#g" \
		-e "s#@CONTROLLER_PORT@#$(controller_port "$n")#g" -e "s#@DATA_DIR@#$(node_dir "$n")/data#g" \
		-e "s#@RF@#$rf#g" -e "s#@MIN_ISR@#$min_isr#g" \
		-e "s#@SESSION_TIMEOUT_MS@#$SESSION_TIMEOUT_MS#g" -e "s#@HEARTBEAT_MS@#$HEARTBEAT_MS#g" \
		"$REPO/scripts/kafka/cluster.properties.tmpl"
	case $KAFKA_VERSION in
	3.*) ;;
	*) # share groups (4.x): their state topic's defaults are 3 and 2, too much for 1 node
		printf '\nshare.coordinator.state.topic.replication.factor=%s\nshare.coordinator.state.topic.min.isr=%s\n' \
			"$rf" "$min_isr"
		;;
	esac
}

# check_ports N: refuse when node N's ports are taken (node N itself is down).
check_ports() {
	local port who
	for port in $(broker_port "$1") $(controller_port "$1"); do
		listening "$port" || continue
		who=$(ss -Htlnp "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n1 || true)
		die "port 127.0.0.1:$port of node $1 is taken by another process${who:+ ($who)}: is another cluster up (another KAFKA_VERSION, KAFKA_NODES or KAFKA_CLUSTER_DIR)? Stop it with its own 'scripts/kafkacluster.sh down' first"
	done
}

# prepare N...: write each node's config and format the ones never formatted (in parallel).
prepare() {
	kafka_jars
	mkdir -p "$DIR"
	touch "$MARKER"
	local id n d
	id=$(cluster_id)
	local -a pids=() todo=()
	for n; do
		d=$(node_dir "$n")
		mkdir -p "$d/data"
		render "$n" >"$d/server.properties"
		[ ! -f "$d/data/meta.properties" ] || continue
		kafka_java kafka.tools.StorageTool format -t "$id" -c "$d/server.properties" \
			--ignore-formatted >"$d/format.log" 2>&1 9>&- &
		pids+=($!)
		todo+=("$n")
	done
	local i
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || {
			d=$(node_dir "${todo[$i]}")
			cat "$d/format.log" >&2
			die "formatting node ${todo[$i]} failed"
		}
	done
	[ ${#todo[@]} -eq 0 ] || log "formatted the storage of node(s) ${todo[*]} (cluster id $id)"
}

# launch N: start node N's JVM detached: setsid, so it outlives the calling shell, fd 9
# (the lock) closed, and forked from a subshell that exits at once, so it is never a child
# of this script (run's shell would otherwise be its parent, and a killed node a zombie
# until CMD ends). The inner shell records its pid and execs java.
launch() {
	local n=$1 d
	d=$(node_dir "$n")
	rm -f "$d/pid"
	log "starting node $n: Kafka $KAFKA_VERSION on 127.0.0.1:$(broker_port "$n") (log: $d/server.log)"
	(
		# shellcheck disable=SC2016 # expanded by the inner shell
		PIDFILE="$d/pid" setsid nohup bash -c 'echo $$ >"$PIDFILE"; exec "$@"' kafka \
			java $NODE_JVM_OPTS -XX:+ExitOnOutOfMemoryError \
			-Djava.awt.headless=true -Dkafka.logs.dir="$d" "$KAFKA_SERVER_LOGGING" \
			-cp "$KAFKA_LIBS/*" kafka.Kafka "$d/server.properties" \
			>>"$d/kafka.out" 2>&1 </dev/null 9>&- &
	)
	local _
	for _ in $(seq 50); do
		[ -s "$d/pid" ] && return 0
		sleep 0.1
	done
	die "node $n did not start (see $d/kafka.out)"
}

# alive_or_die N: node N's process still runs, else show its logs and fail.
alive_or_die() {
	node_pid "$1" >/dev/null && return 0
	local d
	d=$(node_dir "$1")
	tail_log "$d/kafka.out" 20
	tail_log "$d/server.log" 60
	die "node $1 exited during startup"
}

timed_out() {
	local n
	for n in $(seq "$NODES"); do tail_log "$(node_dir "$n")/server.log" 15; done
	die "$*"
}

# wait_cluster: every node runs, answers on its broker port, and the metadata lists all
# N brokers, each of them answering (so a topic of replication factor N can be created).
wait_cluster() {
	local deadline=$((SECONDS + READY_TIMEOUT)) n want got
	want=$(seq "$NODES" | sed 's/$/ ok/')
	while :; do
		local ports=1
		for n in $(seq "$NODES"); do
			alive_or_die "$n"
			port_open "$(broker_port "$n")" || ports=0
		done
		if [ $ports = 1 ]; then
			got=$(registered "$(brokers)" || true)
			[ "$got" != "$want" ] || return 0
		fi
		[ $SECONDS -lt $deadline ] ||
			timed_out "cluster not ready after $READY_TIMEOUT s (live brokers in the metadata: $(echo "${got:-none}" | paste -sd,))"
		sleep 1
	done
}

# wait_node N: node N answers on its broker port and the metadata of another node (of its
# own when no other is up) lists it as a live broker.
wait_node() {
	local n=$1 deadline=$((SECONDS + READY_TIMEOUT)) m others=""
	while :; do
		alive_or_die "$n"
		if port_open "$(broker_port "$n")"; then
			others=""
			for m in $(seq "$NODES"); do
				[ "$m" != "$n" ] && [ "$(node_state "$m")" = up ] && others="$others $m"
			done
			if [ -z "$others" ]; then others=$n; fi
			# shellcheck disable=SC2086
			registered "$(brokers $others)" | grep -qx "$n ok" && return 0
		fi
		[ $SECONDS -lt $deadline ] ||
			timed_out "node $n not registered after $READY_TIMEOUT s (asked node(s)${others:- none})"
		sleep 1
	done
}

cmd_up() {
	local t0=$SECONDS n state todo=()
	for n in $(seq "$NODES"); do
		state=$(node_state "$n")
		case $state in
		down) todo+=("$n") ;;
		paused) die "node $n is paused: 'scripts/kafkacluster.sh resume $n' first" ;;
		esac
	done
	if [ ${#todo[@]} -eq 0 ]; then
		wait_cluster
		log "cluster already up: $(brokers) (Kafka $KAFKA_VERSION, $DIR)"
		return 0
	fi
	for n in "${todo[@]}"; do check_ports "$n"; done
	prepare "${todo[@]}"
	for n in "${todo[@]}"; do launch "$n"; done
	wait_cluster
	log "cluster up in $((SECONDS - t0)) s: $(brokers) (Kafka $KAFKA_VERSION, $NODES node(s), $DIR)"
}

cmd_start() {
	local n=$1 t0=$SECONDS
	case $(node_state "$n") in
	paused) die "node $n is paused: 'resume $n', not 'start $n'" ;;
	down) ;;
	*)
		wait_node "$n"
		log "node $n already up (pid $(node_pid "$n"))"
		return 0
		;;
	esac
	[ -f "$MARKER" ] || die "no cluster in $DIR: 'scripts/kafkacluster.sh up' first"
	check_ports "$n"
	prepare "$n"
	launch "$n"
	wait_node "$n"
	log "node $n up and registered in $((SECONDS - t0)) s (pid $(node_pid "$n"))"
}

# ---------------------------------------------------------------- other verbs

cmd_down() { signal_stop "$DOWN_TIMEOUT" $(seq "$NODES"); }

cmd_clean() {
	cmd_down
	[ -d "$DIR" ] || return 0
	[ -f "$MARKER" ] || die "$DIR is not a cluster directory of scripts/kafkacluster.sh (no $(basename "$MARKER")): not deleting it"
	rm -rf "$DIR"
	log "removed $DIR"
}

cmd_stop() { signal_stop "$STOP_TIMEOUT" "$1"; }

cmd_kill() {
	local pid
	pid=$(node_pid "$1") || {
		log "node $1 already down"
		return 0
	}
	log "killing node $1 (pid $pid, SIGKILL)"
	kill -KILL "$pid" 2>/dev/null || true
	wait_gone "$pid" 30 "$1" || die "node $1 (pid $pid) still there 30 s after SIGKILL: $(gone_report "$pid" "$1")"
	rm -f "$(node_dir "$1")/pid"
}

cmd_signal() {
	local sig=$1 n=$2 pid
	pid=$(node_pid "$n") || die "node $n is down"
	kill "-$sig" "$pid"
	log "node $n (pid $pid): SIG$sig"
}

cmd_pid() {
	node_pid "$1" || {
		log "node $1 is down"
		return 1
	}
}

cmd_status() {
	local n pid
	for n in $(seq "$NODES"); do
		pid=$(node_pid "$n" || echo -)
		printf 'node %s: %-8s pid=%s broker=127.0.0.1:%s controller=127.0.0.1:%s\n' "$n" \
			"$(node_state "$n")" "$pid" "$(broker_port "$n")" "$(controller_port "$n")"
	done
	echo "cluster: kafka=$KAFKA_VERSION nodes=$NODES broker.session.timeout.ms=$SESSION_TIMEOUT_MS broker.heartbeat.interval.ms=$HEARTBEAT_MS dir=$DIR"
}

cmd_env() {
	echo "export OUTBOX_RELAY_KAFKA_BROKERS='$(brokers)'"
	echo "export OUTBOX_RELAY_TEST_KAFKA_BROKERS='$(brokers)'"
	echo "export KAFKA_PORT_PREFIX=$PORT_PREFIX"
}

# controllers NODE...: the controller listeners of those nodes.
controllers() {
	local n list=""
	for n; do list=$list${list:+,}127.0.0.1:$(controller_port "$n"); done
	echo "$list"
}

# cmd_controller: the quorum leader's id, as the running nodes see it (retried while an
# election is under way, up to 30 s). Asked of their controller listeners: a broker
# forwards DescribeQuorum to the controller it knew, and waits out its request timeout
# (30 s) when that one is paused.
cmd_controller() {
	kafka_jars
	local deadline=$((SECONDS + 30)) n up out id
	while :; do
		up=""
		for n in $(seq "$NODES"); do
			case $(node_state "$n") in up | starting) up="$up $n" ;; esac
		done
		if [ -n "$up" ]; then
			# shellcheck disable=SC2086
			out=$(tool_out 20 org.apache.kafka.tools.MetadataQuorumCommand \
				--bootstrap-controller "$(controllers $up)" describe --status || true)
			id=$(sed -n 's/^LeaderId:[[:space:]]*\([0-9]*\)$/\1/p' <<<"$out")
			if [ -n "$id" ]; then
				echo "$id"
				return 0
			fi
		fi
		[ $SECONDS -lt $deadline ] || die "no quorum leader known to the live node(s)${up:- (none up)} after 30 s"
		sleep 1
	done
}

# run: the EXIT trap of cmd_run; stops and deletes the cluster, keeps CMD's status.
run_cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	take_lock
	cmd_clean || log "WARNING: cleaning $DIR failed"
	log "run: exit $rc after $((SECONDS - RUN_T0)) s (cluster up in ${RUN_UP:-?} s; stopped and removed)"
	exit "$rc"
}

cmd_run() {
	[ $# -ge 1 ] || usage
	take_lock
	local n
	for n in $(seq "$NODES"); do
		[ "$(node_state "$n")" = down ] ||
			die "node $n of $DIR is running: 'run' wants a cluster of its own ('scripts/kafkacluster.sh clean' first)"
	done
	RUN_T0=$SECONDS
	trap run_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	if [ -d "$DIR" ]; then cmd_clean; fi # leftovers of a stopped cluster: start afresh
	cmd_up
	RUN_UP=$((SECONDS - RUN_T0))
	exec 9>&- # let CMD's own calls (kill N, start N...) take the lock
	eval "$(cmd_env)"
	log "run: $*"
	local rc=0
	"$@" || rc=$?
	exit "$rc"
}

usage() { print_usage 32; }

main() {
	local verb=${1:-}
	[ -n "$verb" ] || usage
	shift
	case $verb in
	kill | stop | start | pause | resume | pid) check_node_arg "${1:-}" ;;
	esac
	case $verb in
	up) take_lock && cmd_up ;;
	down) take_lock && cmd_down ;;
	clean) take_lock && cmd_clean ;;
	start) take_lock && cmd_start "$1" ;;
	stop) take_lock && cmd_stop "$1" ;;
	kill) cmd_kill "$1" ;;
	pause) cmd_signal STOP "$1" ;;
	resume) cmd_signal CONT "$1" ;;
	pid) cmd_pid "$1" ;;
	status) cmd_status ;;
	env) cmd_env ;;
	controller) cmd_controller ;;
	run) cmd_run "$@" ;;
	kafka-class)
		[ $# -ge 1 ] || die "usage: scripts/kafkacluster.sh kafka-class CLASS [ARGS...]"
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
