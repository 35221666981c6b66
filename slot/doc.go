// Package slot manages the publication and the logical replication slot the
// relay reads from, and reports the slot's health.
//
// The slot is the relay's durable position: PostgreSQL keeps WAL from its
// restart_lsn and resumes decoding at its confirmed_flush_lsn. Ensure refuses
// a slot the relay must not use — one of another output plugin, of another
// database, or held by another process — with an error that says what to do,
// because streaming from such a slot would silently lose or steal events.
package slot
