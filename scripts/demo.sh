#!/usr/bin/env bash
# End-to-end demo of outbox-relay against the local stack:
#
#   1. build bin/outbox-relay and run "outbox-relay migrate"
#      (outbox table, publication, replication slot);
#   2. start "outbox-relay run" in the background (log: .stack/demo-relay.log);
#   3. produce orders with examples/orders (one order.confirmed event each,
#      through outbox.Writer.Transition, and a few low-priority order.viewed);
#   4. back-pressure: examples/orders runs again with a small soft budget on the
#      slot's retained WAL; the relay stops, the order.viewed events are refused
#      (ErrBackpressure) once the budget is crossed while confirmations go on, and
#      they resume after the relay restarts and catches up;
#   5. read the topic back with examples/tail;
#   6. examples/shipping (package inbox) creates one shipment per confirmed
#      order, then replays the topic under a fresh consumer group (a forced
#      redelivery): every event is absorbed as a duplicate, none applied twice;
#   7. outbox-relay reconcile over the last 10 minutes (outbox vs Kafka vs shipping);
#   8. show "outbox-relay slot status", then stop the relay with SIGTERM;
#   9. schema registry (docs/schemas.md): a second relay, on a table, slot and topic of its
#      own (public.outbox_avro, outbox_relay_avro, outbox.avro.order), writes Avro in the
#      Confluent wire format (--record-format avro); examples/orders --record-format avro
#      registers the order.confirmed schema (subject outbox.avro.order-value, version 1 =
#      the events' schema_version), checks every event before commit (outboxschema), and
#      one order with a bad payload is refused before commit (*outboxschema.SchemaError);
#      examples/tail decodes the Avro values with the registry and prints them as JSON.
#      The scene's slot is dropped at its end.
#
# Assumes the stack is up: "make demo" starts it first if it does not answer (and the
# registry, which this script also starts if it does not answer).
# Tunables (env): DEMO_ORDERS_DURATION (5s), DEMO_TAIL_DURATION (8s), DEMO_SHIPPING_IDLE (4s),
# DEMO_AVRO_DURATION (2s: the Avro scene's orders, 2 workers x 5 orders/s),
# DEMO_BACKPRESSURE_SECONDS (6: the budget is the WAL the orders write in that long, above
# the slot's current retention), OUTBOX_RELAY_METRICS_ADDR (127.0.0.1:9187), PSQL (psql from
# PATH, else PostgreSQL 15's); OUTBOX_RELAY_TABLE, _SLOT and _PUBLICATION are honoured by the
# relay and by examples/orders.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() {
	printf 'demo: ERROR: %s\n' "$*" >&2
	exit 1
}

RELAY_BIN=bin/outbox-relay
RELAY_LOG=.stack/demo-relay.log
RELAY_PID=
ORDERS_BIN=bin/orders
ORDERS_PID=
TABLE=${OUTBOX_RELAY_TABLE:-public.outbox}
SLOT=${OUTBOX_RELAY_SLOT:-outbox_relay}
PSQL=${PSQL:-$(command -v psql || echo /usr/lib/postgresql/15/bin/psql)}

# cleanup stops the orders and the relay if they are still running (the script
# failed or was interrupted) and shows the relay's log when something went wrong.
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$ORDERS_PID" ] && kill -0 "$ORDERS_PID" 2>/dev/null; then
		kill -INT "$ORDERS_PID" 2>/dev/null || true
		wait "$ORDERS_PID" 2>/dev/null || true
	fi
	if [ -n "$RELAY_PID" ] && kill -0 "$RELAY_PID" 2>/dev/null; then
		echo "demo: stopping relay (pid $RELAY_PID)" >&2
		kill -TERM "$RELAY_PID" 2>/dev/null || true
		wait "$RELAY_PID" 2>/dev/null || true
	fi
	if [ "$rc" -ne 0 ] && [ -f "$RELAY_LOG" ]; then
		echo "----- last 30 lines of $RELAY_LOG -----" >&2
		tail -n 30 "$RELAY_LOG" >&2 || true
	fi
	exit "$rc"
}
trap cleanup EXIT

# sql runs one statement on the demo database; :'slot' is the slot's name.
sql() {
	"$PSQL" -X -q -t -A -v ON_ERROR_STOP=1 -v slot="$SLOT" "$OUTBOX_RELAY_DATABASE_URL" <<<"$1"
}

# start_relay [FLAGS...] runs "outbox-relay run FLAGS" in the background, its log appended
# to $RELAY_LOG. Heartbeats every second (default 10 s) let the idle relay confirm past new
# WAL soon.
start_relay() {
	OUTBOX_RELAY_CREATE_TOPICS=true OUTBOX_RELAY_LOG_FORMAT=console \
		OUTBOX_RELAY_HEARTBEAT_INTERVAL=${OUTBOX_RELAY_HEARTBEAT_INTERVAL:-1s} \
		"$RELAY_BIN" run "$@" >>"$RELAY_LOG" 2>&1 &
	RELAY_PID=$!
	sleep 1
	kill -0 "$RELAY_PID" 2>/dev/null || {
		wait "$RELAY_PID" && rc=0 || rc=$?
		RELAY_PID=
		die "relay exited right away with status $rc"
	}
	echo "relay running, pid $RELAY_PID"
}

# stop_relay stops it with SIGTERM (a clean drain) and checks its exit status.
stop_relay() {
	kill -TERM "$RELAY_PID"
	wait "$RELAY_PID" && rc=0 || rc=$?
	RELAY_PID=
	echo "relay exited with status $rc"
	[ "$rc" -eq 0 ] || die "relay did not shut down cleanly (status $rc)"
}
trap 'exit 130' INT
trap 'exit 143' TERM

# The back-pressure scene's orders run: its output, and how many lines of it are shown.
BP_OUT=.stack/demo-backpressure.out
BP_SHOWN=0

# follow TIMEOUT CHECK shows the new lines of $BP_OUT until CHECK succeeds on a
# progress line ("orders: 3s: ... views written W, views refused R; back-pressure
# off|ENGAGED (...)"), called as CHECK WRITTEN REFUSED STATE. It fails after
# TIMEOUT seconds, or when the orders run has ended.
follow() {
	local deadline=$((SECONDS + $1)) check=$2 n line written refused state
	while :; do
		n=$(wc -l <"$BP_OUT")
		while [ "$BP_SHOWN" -lt "$n" ]; do
			BP_SHOWN=$((BP_SHOWN + 1))
			line=$(sed -n "${BP_SHOWN}p" "$BP_OUT")
			printf '  %s\n' "$line"
			[[ $line =~ views\ written\ ([0-9]+),\ views\ refused\ ([0-9]+)\;\ back-pressure\ ([A-Za-z]+) ]] || continue
			written=${BASH_REMATCH[1]} refused=${BASH_REMATCH[2]} state=${BASH_REMATCH[3]}
			if "$check" "$written" "$refused" "$state"; then
				return 0
			fi
		done
		kill -0 "$ORDERS_PID" 2>/dev/null || return 1
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

# Checks for follow. WRITTEN0 and REFUSED0 are the counts at the last match.
WRITTEN0=0
REFUSED0=0
# progress: any progress line (before the relay stops the views are written; on a
# busy shared stack back-pressure may engage already, and the scene goes on).
# refused: more views refused than at the last match. released: back-pressure off.
# resumed: views written again, none refused since the release.
progress() { WRITTEN0=$1 REFUSED0=$2; }
refused() { [ "$2" -gt "$REFUSED0" ] && WRITTEN0=$1 REFUSED0=$2; }
released() { [ "$3" = off ] && WRITTEN0=$1 REFUSED0=$2; }
resumed() { [ "$1" -gt "$WRITTEN0" ] && [ "$2" -eq "$REFUSED0" ] && [ "$3" = off ]; }

# retained prints the WAL bytes the slot retains (what the orders' health monitor reads).
retained() {
	sql "select coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint from pg_replication_slots where slot_name = :'slot'"
}

# advance_restart_lsn runs CHECKPOINT and waits (up to 30 s) until the slot's
# restart_lsn moves. PostgreSQL moves a logical slot's restart_lsn only past a
# running-transactions record, logged every 15 s on a busy database and at every
# checkpoint, once the relay has confirmed past it: the checkpoint saves the demo
# from waiting up to 15 s for one, so the slot's retained WAL starts from a low point.
advance_restart_lsn() {
	local before deadline=$((SECONDS + 30))
	before=$(sql "select restart_lsn from pg_replication_slots where slot_name = :'slot'")
	sql "checkpoint" >/dev/null
	until [ "$(sql "select restart_lsn > '$before' from pg_replication_slots where slot_name = :'slot'")" = t ]; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "(the slot's restart_lsn did not move within 30 s; going on)"
			return 0
		fi
		sleep 0.2
	done
}

# backpressure_scene: examples/orders with a small soft budget on the slot's retained
# WAL (what it retains now, plus DEMO_BACKPRESSURE_SECONDS of the WAL rate measured
# above), its health monitor reading every second. The relay stops: retained WAL
# grows, the budget is crossed and the order.viewed events (PriorityLow) are refused
# with ErrBackpressure, while the confirmations (critical) go on. The relay restarts
# and catches up: the budget releases and the views are written again.
backpressure_scene() {
	say "back-pressure: stop the relay and watch the low-priority order.viewed events"
	local base budget margin tries=0
	margin=$((WAL_RATE * ${DEMO_BACKPRESSURE_SECONDS:-6}))
	[ "$margin" -ge $((1 << 20)) ] || margin=$((1 << 20))
	# A relay that has just caught up on a long backlog (a slot left behind by earlier
	# runs) moves restart_lsn in steps, one per running-transactions record: a budget
	# sized from an early step is never crossed. Advance until the slot retains no more
	# than a few margins (at most 5 steps).
	advance_restart_lsn
	base=$(retained)
	while [ "$base" -gt $((4 * margin)) ] && [ "$tries" -lt 5 ]; do
		tries=$((tries + 1))
		advance_restart_lsn
		base=$(retained)
	done
	budget=$((base + margin))
	echo "the slot retains $((base >> 10)) KiB; the orders write about $((WAL_RATE >> 10)) KiB of WAL per second;"
	echo "soft budget: retained WAL > $((budget >> 10)) KiB refuses order.viewed (order.confirmed is critical: never refused)"
	: >"$BP_OUT"
	BP_SHOWN=0 WRITTEN0=0 REFUSED0=0
	"$ORDERS_BIN" --table "$TABLE" --duration 5m --view-rate 50 --progress 1s \
		--backpressure-slot "$SLOT" --backpressure-max-retained-wal "$budget" --backpressure-interval 1s \
		>"$BP_OUT" 2>&1 &
	ORDERS_PID=$!
	follow 30 progress || die "examples/orders printed no progress"
	follow 5 progress || die "examples/orders printed no progress"

	echo "-- stop the relay: nothing confirms the slot any more, its retained WAL grows"
	stop_relay
	follow 90 refused || die "no order.viewed was refused within 90 s of the relay stopping"
	follow 5 refused || die "order.viewed events were refused only once"

	echo "-- restart the relay: it catches up, the slot's retained WAL drops"
	start_relay
	advance_restart_lsn
	follow 60 released || die "back-pressure did not release within 60 s of the relay catching up"
	follow 10 resumed || die "order.viewed events were not written again after back-pressure released"

	kill -INT "$ORDERS_PID"
	wait "$ORDERS_PID" && rc=0 || rc=$?
	ORDERS_PID=
	follow 0 false || true # the rest of the output: the final line
	[ "$rc" -eq 0 ] || die "examples/orders failed (status $rc)"
	grep -Eq 'views refused [1-9]' "$BP_OUT" || die "the final line counts no refused views"
	echo "order.viewed events were refused while the relay was down and resumed after it caught up; no order.confirmed was refused"
}

# The stack answers at its addresses: a stack started from another checkout of the repo
# (whose "scripts/stack.sh status" here says down) serves the demo as well.
eval "$(scripts/stack.sh env)"
b=${OUTBOX_RELAY_KAFKA_BROKERS%%,*}
if ! sql "select 1" >/dev/null 2>&1 || ! timeout 2 bash -c "exec 3<>/dev/tcp/${b%:*}/${b##*:}" 2>/dev/null; then
	die "the local stack does not answer at $b and PostgreSQL (run \"scripts/stack.sh up\" or \"make demo\"):
$(scripts/stack.sh status)"
fi
export OUTBOX_RELAY_METRICS_ADDR=${OUTBOX_RELAY_METRICS_ADDR:-127.0.0.1:9187}
mkdir -p .stack bin

say "build $RELAY_BIN"
make --no-print-directory build

# migrate [--table T --slot S --publication P] runs "outbox-relay migrate" with them.
migrate() {
	local out
	if ! out=$("$RELAY_BIN" migrate "$@" 2>&1); then
		# On this throwaway stack, an earlier demo's slot may have been
		# invalidated (max_slot_wal_keep_size) while other work (make test,
		# make bench) wrote lots of WAL. Its events are disposable demo
		# events: start over with a new slot. On a real database that is what
		# "outbox-relay recover" is for, never a silent drop.
		grep -q 'was invalidated (wal_status = lost)' <<<"$out" || die "migrate failed: $out"
		echo "the demo's slot on this local stack was invalidated by earlier runs; dropping and recreating it (demo data only)"
		"$RELAY_BIN" slot drop "${@:3}" # the flags but --table
		"$RELAY_BIN" migrate "$@"
	else
		echo "$out"
	fi
}

# The schema registry scene's relay: its own table, slot, publication and topic, so that
# its record format (avro) is not the first relay's (native).
AVRO_TABLE=public.outbox_avro
AVRO_SLOT=outbox_relay_avro
AVRO_TOPIC_TEMPLATE='outbox.avro.{aggregate_type}'
AVRO_TOPIC=outbox.avro.order

# avro_scene: the schema registry formats end to end (step 9 above).
avro_scene() {
	local reg=$TEST_SCHEMA_REGISTRY_URL
	say "schema registry: a second relay writes Avro to $AVRO_TOPIC (table $AVRO_TABLE, registry $reg)"
	if ! curl -fsS -m 5 -o /dev/null "$reg/subjects" 2>/dev/null; then
		scripts/stack.sh registry-start
	fi
	local where=(--table "$AVRO_TABLE" --slot "$AVRO_SLOT" --publication "$AVRO_SLOT")
	migrate "${where[@]}"
	RELAY_LOG=.stack/demo-relay-avro.log
	: >"$RELAY_LOG"
	echo "outbox-relay run ${where[*]} --topic-template '$AVRO_TOPIC_TEMPLATE' --record-format avro --schema-registry-url $reg (log: $RELAY_LOG)"
	start_relay "${where[@]}" --topic-template "$AVRO_TOPIC_TEMPLATE" --record-format avro --schema-registry-url "$reg"

	echo "-- examples/orders --record-format avro --bad-order: register the schema, check every event before commit"
	local since written
	since=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
	"$ORDERS_BIN" --table "$AVRO_TABLE" --topic-template "$AVRO_TOPIC_TEMPLATE" --record-format avro \
		--schema-registry-url "$reg" --bad-order --duration "${DEMO_AVRO_DURATION:-2s}" --workers 2 --rate 5 --progress 0 |
		tee .stack/demo-avro-orders.out
	grep -q 'refused before commit: \*outboxschema.SchemaError, Field "amount_cents"' .stack/demo-avro-orders.out ||
		die "the bad order was not refused by the schema check"
	written=$(sed -n 's/.*, events written \([0-9]*\) (.*/\1/p' .stack/demo-avro-orders.out)
	[ "${written:-0}" -gt 0 ] || die "examples/orders wrote no Avro events"

	echo "-- examples/tail --schema-registry-url: the $written records decoded with their Avro schema, printed as JSON"
	go run ./examples/tail --topic "$AVRO_TOPIC" --since "$since" --schema-registry-url "$reg" \
		--max-records "$written" --duration 30s >.stack/demo-avro-tail.out ||
		die "examples/tail could not decode the Avro records (see .stack/demo-avro-tail.out)"
	sed -n '1,3p' .stack/demo-avro-tail.out
	echo "  ... ($(($(wc -l <.stack/demo-avro-tail.out) - 5)) more lines in .stack/demo-avro-tail.out) ..."
	tail -n 2 .stack/demo-avro-tail.out
	grep -q "^tail: $written values decoded with the schema registry, 0 not framed, 0 did not decode" .stack/demo-avro-tail.out ||
		die "examples/tail did not decode the $written Avro records"

	stop_relay
	"$RELAY_BIN" slot drop --slot "$AVRO_SLOT" --publication "$AVRO_SLOT"
	echo "the scene's slot $AVRO_SLOT is dropped: nothing retains WAL for it after the demo"
}

say "outbox-relay migrate"
migrate

say "outbox-relay run (background, log: $RELAY_LOG)"
: >"$RELAY_LOG"
start_relay

say "produce orders (examples/orders)"
go build -o "$ORDERS_BIN" ./examples/orders
mark=$(sql "select pg_current_wal_lsn() || ' ' || extract(epoch from clock_timestamp())")
"$ORDERS_BIN" --table "$TABLE" --duration "${DEMO_ORDERS_DURATION:-5s}"
# The WAL written per second meanwhile (the orders and whatever else the database
# did): the back-pressure scene sizes its budget with it.
WAL_RATE=$(sql "select (pg_wal_lsn_diff(pg_current_wal_lsn(), '${mark% *}')
	/ greatest(extract(epoch from clock_timestamp()) - ${mark#* }, 1))::bigint")

backpressure_scene

say "read them back from Kafka (examples/tail)"
go run ./examples/tail --from-beginning --duration "${DEMO_TAIL_DURATION:-8s}" >.stack/demo-tail.out
# Thousands of records: show the first and the last few (all are in the file).
head -n 4 .stack/demo-tail.out
echo "  ... ($(($(wc -l <.stack/demo-tail.out) - 6)) more lines in .stack/demo-tail.out) ..."
tail -n 2 .stack/demo-tail.out
records=$(sed -n 's/^tail: \([0-9]*\) records from .*/\1/p' .stack/demo-tail.out)
[ "${records:-0}" -gt 0 ] || die "no records reached Kafka"

say "ship the confirmed orders (examples/shipping, effects applied once via the inbox)"
go run ./examples/shipping --until-idle "${DEMO_SHIPPING_IDLE:-4s}" | tee .stack/demo-shipping.out
grep -q 'shipping: done:' .stack/demo-shipping.out || die "shipping did not finish"

say "forced redelivery: replay the topic under a fresh consumer group (same inbox)"
go run ./examples/shipping --group "shipping-replay-$(date +%s)" --until-idle "${DEMO_SHIPPING_IDLE:-4s}" | tee .stack/demo-replay.out
grep -Eq 'shipping: done: applied 0, duplicates absorbed [1-9]' .stack/demo-replay.out ||
	die "the replay applied events again or absorbed none"
echo "replay: every redelivered event was absorbed; shipments and counter unchanged"

say "outbox-relay reconcile --since 10m --consumer shipping"
"$RELAY_BIN" reconcile --since 10m --settle 5s --aggregate-type order \
	--consumer shipping --consumer-schema shipping || die "reconcile reports missing events (exit $?)"

say "outbox-relay slot status"
"$RELAY_BIN" slot status

say "stop the relay (SIGTERM)"
stop_relay
echo "----- last 10 lines of $RELAY_LOG -----"
tail -n 10 "$RELAY_LOG"

avro_scene
say "demo done"
