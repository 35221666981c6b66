package relay

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/replication"
)

// positionCheck makes sure the position read from Kafka names this
// server's WAL before anything skipped by it counts: the stream must find,
// in the transaction committing at the position's commit LSN, the event
// the record names (its EventID at ordinal Events-1).
//
// Why: a server restored from a disk snapshot keeps its system identifier
// and its timeline (it runs crash recovery, not archive recovery), so the
// identity check passes; and its WAL may have grown past the old position
// before the relay starts, so the check against the WAL end
// (PositionAheadError) passes too. The transactions of the new history
// before the position would then be skipped, and once confirmed to the
// slot, lost. The slot and the PostgreSQL checkpoint were restored with
// the server and stay consistent with it; only the position in Kafka
// outlives the restore.
//
// How, without reading the WAL twice: a guard transaction, begun in the
// tracker before the stream's first, holds the flushed position at the
// stream's start until the check is done, so nothing the skipper drops
// meanwhile is confirmed to the slot or saved in a checkpoint (and no
// keepalive moves it: the tracker is not idle). Nothing is published
// either: every event before the position is one it skips. A match
// releases the guard; a mismatch stops the stream with a
// *PositionMismatchError, and a start after the remedy replays from the
// slot what was skipped. Only the stream goroutine calls it; its methods
// are no-ops on nil.
type positionCheck struct {
	key     string
	lsn     pglogrepl.LSN
	events  int
	eventID string

	tracker *checkpoint.Tracker
	guard   *checkpoint.Txn
	start   pglogrepl.LSN
	log     *slog.Logger
	// in: the current transaction is the position's; done: checked.
	in, done bool
}

// positionCheck returns the check of the Kafka position rs applied, for a
// stream from start that tr tracks (before its first transaction); nil
// when no position from Kafka was applied, or when it lies before start:
// the slot replays no transaction committing before its confirmed
// position, so such a position skips nothing (and its transaction would
// never be seen).
func (rs resumeState) positionCheck(tr *checkpoint.Tracker, start pglogrepl.LSN, log *slog.Logger) *positionCheck {
	if rs.kafka == nil {
		return nil
	}
	lsn, err := rs.kafka.lsn()
	if err != nil || lsn < start {
		return nil
	}
	return &positionCheck{key: rs.kafkaKey, lsn: lsn, events: rs.kafka.Events, eventID: rs.kafka.EventID,
		tracker: tr, guard: tr.BeginTx(time.Time{}, 0, 0), start: start, log: log}
}

// begin checks a transaction's commit LSN: a transaction committing past
// the position before one at it means this WAL holds no transaction there.
func (c *positionCheck) begin(b replication.Begin) error {
	if c == nil || c.done || b.FinalLSN < c.lsn {
		return nil
	}
	if b.FinalLSN > c.lsn {
		return c.mismatch(fmt.Sprintf("no transaction committing there (the next commits at %s)", b.FinalLSN))
	}
	c.in = true
	return nil
}

// event checks an event of the position's transaction.
func (c *positionCheck) event(ev *replication.WALEvent) error {
	if c == nil || !c.in || ev.Ordinal != c.events-1 {
		return nil
	}
	// A record without an event id is checked by its transaction and its
	// event count alone.
	if c.eventID != "" && ev.EventID != c.eventID {
		return c.mismatch(fmt.Sprintf("event %s there", ev.EventID))
	}
	c.in, c.done = false, true
	c.tracker.Commit(c.guard, c.start)
	c.log.Info("the committed position in Kafka names the event this server's WAL holds there; what it skips is confirmed from now on",
		slog.String("stage", "transaction"), slog.String("commit_lsn", c.lsn.String()), slog.Int("events", c.events),
		slog.String("event_id", c.eventID))
	return nil
}

// commit ends the position's transaction: it had fewer events than the
// position covers.
func (c *positionCheck) commit(events int) error {
	if c == nil || !c.in {
		return nil
	}
	return c.mismatch(fmt.Sprintf("a transaction of %d events there", events))
}

func (c *positionCheck) mismatch(found string) error {
	c.in = false
	return &PositionMismatchError{Key: c.key, LSN: c.lsn, Events: c.events, EventID: c.eventID, Found: found}
}

// PositionMismatchError is an exactly-once start whose committed position
// in Kafka, of this server's system and timeline and before its WAL end,
// does not name this server's WAL: the transaction committing at its LSN
// lacks the event the record names (positionCheck). The server's history
// is not the one Kafka holds (restored from a disk snapshot, whose new
// transactions reuse those LSNs, or a copy of the cluster sharing the
// source's name). Nothing skipped by the position was confirmed, and the
// relay stops.
type PositionMismatchError struct {
	// Key is the position record's key in the positions topic.
	Key string
	// LSN and Events are the position: the commit LSN of its
	// transaction and how many of its events it covers; EventID is the
	// last one's id ("" in records without one).
	LSN     pglogrepl.LSN
	Events  int
	EventID string
	// Found is what the WAL holds there.
	Found string
}

func (e *PositionMismatchError) Error() string {
	ev := "event " + e.EventID
	if e.EventID == "" {
		ev = "an event"
	}
	return fmt.Sprintf("the committed position in Kafka (key %q) names %s, number %d of the transaction committing at %s, but this server's WAL "+
		"holds %s: its history is not the one Kafka holds (a restore from a disk snapshot keeps the system identifier and the timeline), "+
		"so applying the position would skip events; nothing it skipped was confirmed. Check what happened, then write a tombstone (null value) "+
		"under that key to the positions topic, which makes the relay resume from its PostgreSQL checkpoint and slot",
		e.Key, ev, e.Events, e.LSN, e.Found)
}
