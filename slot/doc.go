// Package slot manages the publication and the logical replication slot the
// relay reads from, and reports the slot's health.
//
// Package slot is part of the engine under package relay and has no
// compatibility promise of its own: relay is what users import.
//
// The slot is the relay's durable position: PostgreSQL keeps WAL from its
// restart_lsn and resumes decoding at its confirmed_flush_lsn. Ensure refuses
// a slot the relay must not use — one of another output plugin, of another
// database, or held by another process — with an error that says what to do,
// because streaming from such a slot would silently lose or steal events.
//
// On PostgreSQL 17 and later the slot is created as a failover slot
// (unless Config.NoFailover): standbys with sync_replication_slots = on
// keep a synchronized copy, so after a failover the promoted standby has
// the slot and the relay resumes there instead of losing the events after
// its position. SetFailover changes an existing slot's flag.
//
// On PostgreSQL 16 and later the slot may live on a hot standby, which
// decodes the WAL it replays, so the primary runs no logical walsender: a
// Manager of the standby (Config.Primary naming its primary) creates the
// slot there, asking the primary for the running-transactions record the
// creation waits for, reads the standby's replayed position as the
// current one, writes the publication on the primary, and reports a slot
// invalidated by a conflict with recovery (Status.Conflicting) as lost.
package slot
