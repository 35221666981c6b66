# shellcheck shell=bash
# Helpers shared by scripts/*.sh (sourced, not executed).

log() { printf '[stack %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}
is_root() { [ "$(id -u)" -eq 0 ]; }

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
