// Package replication reads the outbox table's inserts from a pgoutput
// logical replication connection (Stream) and hands them, decoded into
// Events, to a Sink in WAL order, confirming the positions its Progress
// reports as flushed.
//
// Package replication is part of the engine under package relay and has no
// compatibility promise of its own: relay is what users import.
package replication
