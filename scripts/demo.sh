#!/usr/bin/env bash
# End-to-end demo of outbox-relay against the local stack:
#
#   1. build bin/outbox-relay and run "outbox-relay migrate"
#      (outbox table, publication, replication slot);
#   2. start "outbox-relay run" in the background (log: .stack/demo-relay.log);
#   3. produce orders with examples/orders (one order.confirmed event each);
#   4. read the topic back with examples/tail;
#   5. examples/shipping (package inbox) creates one shipment per confirmed
#      order, then replays the topic under a fresh consumer group (a forced
#      redelivery): every event is absorbed as a duplicate, none applied twice;
#   6. outbox-relay reconcile over the last 10 minutes (outbox vs Kafka vs shipping);
#   7. show "outbox-relay slot status", then stop the relay with SIGTERM.
#
# Assumes the stack is up: "make demo" runs scripts/stack.sh up first.
# Tunables (env): DEMO_ORDERS_DURATION (5s), DEMO_TAIL_DURATION (8s), DEMO_SHIPPING_IDLE (4s),
# OUTBOX_RELAY_METRICS_ADDR (127.0.0.1:9187); OUTBOX_RELAY_TABLE, _SLOT and
# _PUBLICATION are honoured by the relay and (table) by examples/orders.
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

# cleanup stops the relay if it is still running (the script failed or was
# interrupted before step 5) and shows its log when something went wrong.
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
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
trap 'exit 130' INT
trap 'exit 143' TERM

status=$(scripts/stack.sh status)
if ! grep -q '^postgres: *up' <<<"$status" || ! grep -q '^kafka: *up' <<<"$status"; then
	die "the local stack is not up (run \"scripts/stack.sh up\" or \"make demo\"):
$status"
fi
eval "$(scripts/stack.sh env)"
export OUTBOX_RELAY_METRICS_ADDR=${OUTBOX_RELAY_METRICS_ADDR:-127.0.0.1:9187}
mkdir -p .stack bin

say "build $RELAY_BIN"
make --no-print-directory build

say "outbox-relay migrate"
if ! out=$("$RELAY_BIN" migrate 2>&1); then
	# On this throwaway stack, an earlier demo's slot may have been
	# invalidated (max_slot_wal_keep_size) while other work (make test,
	# make bench) wrote lots of WAL. Its events are disposable demo
	# events: start over with a new slot. On a real database that is what
	# "outbox-relay recover" is for, never a silent drop.
	grep -q 'was invalidated (wal_status = lost)' <<<"$out" || die "migrate failed: $out"
	echo "the demo's slot on this local stack was invalidated by earlier runs; dropping and recreating it (demo data only)"
	"$RELAY_BIN" slot drop
	"$RELAY_BIN" migrate
else
	echo "$out"
fi

say "outbox-relay run (background, log: $RELAY_LOG)"
OUTBOX_RELAY_CREATE_TOPICS=true OUTBOX_RELAY_LOG_FORMAT=console \
	"$RELAY_BIN" run >"$RELAY_LOG" 2>&1 &
RELAY_PID=$!
sleep 1
kill -0 "$RELAY_PID" 2>/dev/null || {
	wait "$RELAY_PID" && rc=0 || rc=$?
	RELAY_PID=
	die "relay exited right away with status $rc"
}
echo "relay running, pid $RELAY_PID"

say "produce orders (examples/orders)"
go run ./examples/orders --table "${OUTBOX_RELAY_TABLE:-public.outbox}" --duration "${DEMO_ORDERS_DURATION:-5s}"

say "read them back from Kafka (examples/tail)"
go run ./examples/tail --from-beginning --duration "${DEMO_TAIL_DURATION:-8s}" | tee .stack/demo-tail.out
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
kill -TERM "$RELAY_PID"
wait "$RELAY_PID" && rc=0 || rc=$?
RELAY_PID=
echo "relay exited with status $rc"
echo "----- last 10 lines of $RELAY_LOG -----"
tail -n 10 "$RELAY_LOG"
[ "$rc" -eq 0 ] || die "relay did not shut down cleanly (status $rc)"
say "demo done"
