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
