// Package leader elects one `outbox-relay run` process per replication slot.
//
// Several relays may run for one slot; exactly one streams (the leader), the
// others wait as standbys. Election needs no infrastructure beyond
// PostgreSQL: the leader holds a session-level advisory lock on a dedicated
// connection (a pgx.Conn of its own, never a pooled one, because a session
// lock lives and dies with its backend).
//
// # Key
//
// The lock key is derived from the database name and the slot name (see
// Key): the first 8 bytes, big-endian, of
// SHA-256("outbox-relay/leader\x00" + database + "\x00" + slot), as a bigint
// for pg_try_advisory_lock(bigint). Advisory locks are scoped to the
// database the session is connected to, so relays of one slot contend only
// when they use the same database — which they must anyway, since a logical
// slot belongs to one database. The prefix keeps the key apart from other
// users of advisory locks.
//
// # Losing the lock
//
// A leader must stop publishing as soon as it can no longer be sure it holds
// the lock. It runs a keepalive query on the lock connection every
// KeepaliveInterval; when none has succeeded for Timeout/2 — a connection
// error, a query that hangs on a cut network — the Lease's context is
// cancelled and the relay stops its stream at once.
//
// The server must release the lock of a leader that went silent, also when
// the TCP connection looks alive (a hung network path, a paused process).
// The lock session sets idle_session_timeout = Timeout: PostgreSQL ends a
// session that sent no query for that long, and its locks with it. A cut-off
// leader therefore stops (after at most Timeout/2) before the server frees
// the lock (at least Timeout after its last keepalive), so two leaders never
// overlap while the clocks run at the same rate. A dead process's socket is
// closed by its kernel and frees the lock at once.
//
// A keepalive that runs late (the process or its machine stalled, so the
// deadline passed while it waited to run) still asks the server, with
// Timeout/4 to answer: the server's answer is authoritative, and a session
// it ended for its silence fails the check. Giving up without asking
// turned a stalled machine into a lost leadership and a restarted stream.
//
// # The fence
//
// The lock is an election, not a guarantee: a process paused for longer
// than Timeout resumes believing it leads until its next keepalive fails.
// The slot itself is the fence: PostgreSQL lets one walsender at a time use
// a slot (pg_replication_slots.active_pid), so a new leader can only start
// streaming once the old leader's walsender has ended, and the old one can
// no longer confirm positions. Until then the new leader waits (the caller
// polls the slot); what the old one still publishes are duplicates of
// events the new one re-sends from the slot's position, never a reordering
// of an aggregate's first occurrences.
package leader
