# shellcheck shell=bash
# The phases of `make test` (Makefile, target test), sourced by its one recipe shell. A phase
# runs in the foreground; a job runs in the background, beside the phases, from the moment it
# is started to the moment it is collected, so work that waits on no server (compiles, lint,
# unit tests, fuzzing) never holds up a phase that waits on servers, and no phase waits for it
# before it needs its result (issue 49).
#
#   phase NAME CMD...         run CMD unless a phase or a collected job failed before (then it
#                             is skipped: the later phases depend on the earlier ones' servers
#                             and binaries); prints "=== phase NAME: N s" after it
#   beside NAME NICE CMD...   start CMD at nice NICE in the background, in a process group of
#                             its own, its output to a file; returns at once
#   collect NAME              wait for job NAME, print its output whole, then
#                             "=== phase NAME (beside, nice N): N s" (N counted from its start)
#   finish                    collect every job still running (also after a failure: their
#                             output is part of the diagnosis), print the times of all phases
#                             and jobs, and exit 1 if anything failed
#
# An interrupt (INT, TERM) stops the jobs' process groups: without it, a non-interactive
# shell's background jobs ignore SIGINT and would outlive Ctrl-C.

_ph_dir=$(mktemp -d "${TMPDIR:-/tmp}/outbox-relay-phases.XXXXXX")
_ph_failed=""
_ph_summary=""
declare -A _ph_pid=() _ph_nice=() _ph_t0=()
_ph_order=()

_ph_stop_jobs() {
	local name
	for name in "${_ph_order[@]}"; do
		[ -n "${_ph_pid[$name]:-}" ] || continue
		kill -TERM -- "-${_ph_pid[$name]}" 2>/dev/null || true
	done
}
trap '_ph_stop_jobs; rm -rf "$_ph_dir"; exit 130' INT
trap '_ph_stop_jobs; rm -rf "$_ph_dir"; exit 143' TERM

_ph_note() {
	_ph_summary=$_ph_summary$'\n'"  $1"
}

phase() {
	local name=$1 t0=$SECONDS rc=0
	shift
	if [ -n "$_ph_failed" ]; then
		echo "=== phase $name: skipped (failed before it:$_ph_failed)"
		_ph_note "$name: skipped"
		return 0
	fi
	"$@" || rc=$?
	echo "=== phase $name: $((SECONDS - t0)) s"
	if [ $rc -ne 0 ]; then
		_ph_failed="$_ph_failed $name"
		echo "=== phase $name: FAILED (exit $rc)"
		_ph_note "$name: FAILED after $((SECONDS - t0)) s"
	else
		_ph_note "$name: $((SECONDS - t0)) s"
	fi
}

beside() {
	local name=$1 nice=$2
	shift 2
	if [ -n "$_ph_failed" ]; then
		echo "=== phase $name (beside): not started (failed before it:$_ph_failed)"
		_ph_note "$name (beside): not started"
		return 0
	fi
	echo "=== phase $name (beside, nice $nice): started, output when it ends"
	# setsid: a process group of its own (the job's pid is its id), so that an interrupt can
	# stop the whole job; a background child of this shell is no group leader, so setsid
	# execs in place and $! is the job's pid.
	# The wrapper notes when the job itself ended (collect may come much later), so the
	# summary says whether it overlapped the phases after it.
	# The job's nice value is also its autogroup's (/proc/self/autogroup): with the kernel's
	# autogroup scheduling (sched_autogroup_enabled=1, as on the CI machines), a new session is a
	# scheduling group of its own that shares the CPU equally with the phases' group, whatever
	# the nice value of its processes, which then only orders them within the group. Without
	# this, "nice 19" beside the middle phase took half the CPU (ci26: the phase 573 s instead
	# of 390).
	setsid nice -n "$nice" bash -c '{ echo "$1" >/proc/self/autogroup; } 2>/dev/null; shift; "$@"; rc=$?; echo "$SECONDS" >"$0.ended"; exit $rc' "$_ph_dir/$name" "$nice" "$@" \
		>"$_ph_dir/$name.out" 2>&1 </dev/null &
	_ph_pid[$name]=$!
	_ph_nice[$name]=$nice
	_ph_t0[$name]=$SECONDS
	_ph_order+=("$name")
}

collect() {
	local name=$1 rc=0
	[ -n "${_ph_pid[$name]:-}" ] || return 0
	wait "${_ph_pid[$name]}" || rc=$?
	unset "_ph_pid[$name]"
	local took=$((SECONDS - ${_ph_t0[$name]})) ran=""
	cat "$_ph_dir/$name.out"
	[ ! -f "$_ph_dir/$name.ended" ] || ran=" (ran $(cat "$_ph_dir/$name.ended") s)"
	rm -f "$_ph_dir/$name.out" "$_ph_dir/$name.ended"
	echo "=== phase $name (beside, nice ${_ph_nice[$name]}): $took s$ran"
	if [ $rc -ne 0 ]; then
		_ph_failed="$_ph_failed $name"
		echo "=== phase $name (beside): FAILED (exit $rc; its output is above)"
		_ph_note "$name (beside, nice ${_ph_nice[$name]}): FAILED after $took s$ran"
	else
		_ph_note "$name (beside, nice ${_ph_nice[$name]}): $took s$ran"
	fi
}

finish() {
	local name
	for name in "${_ph_order[@]}"; do collect "$name"; done
	rm -rf "$_ph_dir"
	echo "=== phases:$_ph_summary"
	if [ -n "$_ph_failed" ]; then
		echo "=== FAILED:$_ph_failed"
		return 1
	fi
}
