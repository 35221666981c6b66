package relay

// This file holds the exactly-once mode's source position in Kafka: every
// Kafka transaction of the publisher (publisher.TransactionConfig) ends
// with a record in Publish.PositionsTopic, keyed by the Source, naming the
// last event it covers. The record commits with the events or not at all,
// so the newest committed one is exactly how far Kafka holds the stream.
// A stream start reads it after its InitProducerId fenced (and so
// completed or aborted) every earlier transaction of its own, deciding
// the transactions by their markers (committedPosition), and skips every
// event at or before it; the PostgreSQL checkpoint stays a second,
// conservative record of the same position.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/kafkaclients"
	"github.com/outbox-relay/outbox-relay/internal/kafkafetch"
	"github.com/outbox-relay/outbox-relay/internal/positions"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
)

// kafkaPosition is the value of a position record (JSON): the last event
// a committed Kafka transaction covers, by its transaction's commit LSN
// and its ordinal in that transaction, and the server it came from.
type kafkaPosition struct {
	Version   int    `json:"v"`
	Slot      string `json:"slot"`
	SystemID  string `json:"system_id"`
	Timeline  int32  `json:"timeline"`
	CommitLSN string `json:"commit_lsn"`
	// Events is the number of events of that transaction covered: the
	// last one's ordinal + 1.
	Events      int       `json:"events"`
	EventID     string    `json:"event_id"`
	CommittedAt time.Time `json:"at"`
	// Partitions is the positions topic's partition count when the
	// record was written (0 from relays before it was stored): a reader
	// that sees more knows the key may have moved (movedPosition).
	Partitions int `json:"partitions,omitempty"`
	// offset is the record's offset in the positions partition (not
	// stored).
	offset int64
}

// lsn is the position's commit LSN.
func (p *kafkaPosition) lsn() (pglogrepl.LSN, error) {
	return pglogrepl.ParseLSN(p.CommitLSN)
}

// transactionConfig is the publisher's exactly-once configuration for a
// stream of src on the server id; nil for at-least-once.
func (r *Relay) transactionConfig(id checkpoint.Identity, src Source) *publisher.TransactionConfig {
	p := r.cfg.Publish
	if p.Delivery != ExactlyOnce {
		return nil
	}
	return &publisher.TransactionConfig{
		ID: r.cfg.TransactionalID(src), Interval: p.TransactionInterval, Timeout: p.TransactionTimeout,
		// Half the window each: the next range fills while one commits.
		MaxEvents: max(r.cfg.Window.MaxEvents/2, 1), MaxBytes: int(max(r.cfg.Window.MaxBytes/2, 1)),
		PositionsTopic: p.PositionsTopic, PositionKey: []byte(src.PositionKey()),
		Position: func(last *replication.WALEvent, partitions int) []byte {
			v, _ := json.Marshal(kafkaPosition{Version: 1, Slot: src.Slot, SystemID: id.SystemID, Timeline: id.Timeline,
				CommitLSN: last.TxLSN.String(), Events: last.Ordinal + 1, EventID: last.EventID, CommittedAt: time.Now().UTC(),
				Partitions: partitions})
			return v
		},
	}
}

// positionScanStart is how many offsets before the partition's end the
// newest position record is looked for first; each further pass looks
// four times as far back.
const positionScanStart = 1000

// committedPosition returns the newest committed position record of src
// in partition of the positions topic, nil when there is none (or when
// the newest record under its key is a tombstone); found says whether
// there was a record, a tombstone included. keys are the keys that
// count as src's: its PositionKey, and the legacy key whose records count
// only when written on src's system.
//
// It reads read_uncommitted up to the high watermark, with the
// transaction markers, and decides transactions itself (positionScan),
// instead of reading read_committed up to the last stable offset: the
// partition is shared by every relay on the cluster, and any one's open
// transaction holds the last stable offset back (for up to its
// transaction timeout when that relay died). Reading only up to it would
// resume from an older position of src's and re-publish everything
// since. src's own transactions are all decided here: the InitProducerId
// before this call completed or aborted the last one.
//
// The read goes backwards, a window at a time, each pass from further
// back to the high watermark (so the markers after a window's records are
// read with them): a start costs a few fetches however long the
// uncompacted tail.
func (r *Relay) committedPosition(ctx context.Context, partition int, src Source, keys [][]byte) (pos *kafkaPosition, found bool, err error) {
	topic := r.cfg.Publish.PositionsTopic
	client, closeIdle := kafkaclients.Client(r.cfg.Kafka, "outbox-relay", 10*time.Second)
	defer closeIdle()
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		IsolationLevel: kafka.ReadUncommitted,
		Topics: map[string][]kafka.OffsetRequest{topic: {
			kafka.FirstOffsetOf(partition), kafka.LastOffsetOf(partition),
		}},
	})
	if err != nil {
		return nil, false, fmt.Errorf("positions topic %s: list offsets: %w", topic, err)
	}
	var first, end int64 = -1, -1
	for _, po := range res.Topics[topic] {
		if po.Partition != partition {
			continue
		}
		if po.Error != nil {
			return nil, false, fmt.Errorf("positions topic %s[%d]: list offsets: %w", topic, partition, po.Error)
		}
		first, end = po.FirstOffset, po.LastOffset
	}
	if first < 0 || end < 0 {
		return nil, false, fmt.Errorf("positions topic %s[%d]: no offsets in the answer", topic, partition)
	}
	for window := int64(positionScanStart); end > first; window *= 4 {
		start := max(first, end-window)
		scan := positionScan{keys: keys, systemID: src.SystemID, slot: src.Slot}
		if err := r.scanPositions(ctx, partition, start, end, &scan); err != nil {
			return nil, false, err
		}
		if scan.found || start == first {
			scan.unreadable.log(r.log, topic, partition)
			return scan.last, scan.found, nil
		}
	}
	return nil, false, nil
}

// scanPositions feeds the records of [start, end) of partition, markers
// included, to scan.
func (r *Relay) scanPositions(ctx context.Context, partition int, start, end int64, scan *positionScan) error {
	topic := r.cfg.Publish.PositionsTopic
	rd, err := kafkafetch.New(kafkafetch.Config{
		Brokers: r.cfg.Kafka.Brokers, Dialer: kafkaclients.Dialer(r.cfg.Kafka, "outbox-relay"),
		Topic: topic, Partition: partition, Offset: start, End: end, MaxWait: 100 * time.Millisecond,
		ReadUncommitted: true, Markers: true, Logger: r.log,
	})
	if err != nil {
		return fmt.Errorf("positions topic %s[%d]: %w", topic, partition, err)
	}
	defer rd.Close()
	for {
		// Every record before the high watermark is replicated: the
		// reader reaches End (io.EOF) without waiting.
		rec, err := rd.FetchRecord(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("positions topic %s[%d]: %w", topic, partition, err)
		}
		if rec.Offset >= end {
			return nil
		}
		if err := scan.add(rec); err != nil {
			return fmt.Errorf("positions topic %s[%d] offset %d: %w", topic, partition, rec.Offset, err)
		}
	}
}

// positionScan finds the newest committed position record of a source
// in records read in log order, markers included (read_uncommitted): a
// transactional record counts once its producer's COMMIT marker follows
// it, and never when an ABORT does or no marker does. A record of
// another source (another key, or the legacy key written on another
// system) is skipped, never taken as the newest, and so is one under the
// source's keys that is not a position record (counted and logged:
// unreadableRecords). A tombstone (null value) counts as "no position":
// the remedy of a PositionAheadError.
type positionScan struct {
	keys     [][]byte
	systemID string
	slot     string
	// open holds, by producer id, the source's newest record in that
	// producer's undecided transaction (nil for a tombstone).
	open map[int64]*kafkaPosition
	// last is the newest decided record (nil: a tombstone); found says
	// there was one.
	last  *kafkaPosition
	found bool
	// unreadable are the records under the source's keys that are not
	// position records: skipped (see unreadableRecords).
	unreadable unreadableRecords
}

// unreadableRecords counts the records under a source's keys that a
// position scan could not read (not JSON of a position, or an LSN that
// does not parse), and where they are. Such a record is skipped: neither
// the newest position nor a tombstone, so the scan keeps the newest
// readable record before it. The legacy key is the bare slot name, mostly
// left at its default, so any producer may write under it, and failing
// the read would stop every start for ever. Skipping one that was the
// source's own newest position (garbled, or of a newer format after a
// downgrade) cannot lose events: every earlier record of the source names
// an earlier position, and with none the start resumes from the
// PostgreSQL checkpoint and the slot, which never pass what Kafka holds.
// What it costs is events published again, so it is logged, once per
// read, with the partition and offsets (never the value, which may be
// anything).
type unreadableRecords struct {
	count       int
	first, last int64
	key         []byte
}

func (u *unreadableRecords) add(rec kafkafetch.Record) {
	if u.count == 0 {
		u.first = rec.Offset
	}
	u.count++
	u.last, u.key = rec.Offset, rec.Key
}

// log reports the skipped records of partition of topic, if any.
func (u *unreadableRecords) log(log *slog.Logger, topic string, partition int) {
	if u.count == 0 {
		return
	}
	log.Warn("skipped records under the source's keys in the positions topic that are not position records: "+
		"the start resumes from the newest readable position before them (or from the PostgreSQL checkpoint and the slot), "+
		"so events already in Kafka may be published again; if they are another application's, give the relay its own "+
		"Publish.PositionsTopic or Database.Slot",
		slog.String("stage", "transaction"), slog.String("topic", topic), slog.Int("partition", partition),
		slog.Int("records", u.count), slog.Int64("first_offset", u.first), slog.Int64("last_offset", u.last),
		slog.String("key", string(u.key)))
}

func (s *positionScan) add(rec kafkafetch.Record) error {
	switch rec.Marker {
	case kafkafetch.MarkerCommit:
		if pos, ok := s.open[rec.ProducerID]; ok {
			s.last, s.found = pos, true
		}
		delete(s.open, rec.ProducerID)
		return nil
	case kafkafetch.MarkerAbort:
		delete(s.open, rec.ProducerID)
		return nil
	}
	if !slices.ContainsFunc(s.keys, func(k []byte) bool { return bytes.Equal(k, rec.Key) }) {
		return nil
	}
	var pos *kafkaPosition
	if len(rec.Value) > 0 {
		pos = &kafkaPosition{}
		if err := json.Unmarshal(rec.Value, pos); err != nil {
			s.unreadable.add(rec)
			return nil
		}
		if pos.SystemID != s.systemID || pos.Slot != s.slot {
			return nil // the legacy key of another source
		}
		if _, err := pos.lsn(); err != nil {
			s.unreadable.add(rec)
			return nil
		}
		pos.offset = rec.Offset
	}
	if !rec.Transactional {
		s.last, s.found = pos, true
		return nil
	}
	if s.open == nil {
		s.open = map[int64]*kafkaPosition{}
	}
	s.open[rec.ProducerID] = pos
	return nil
}

// withKafkaPosition is rs with the exactly-once position pos applied:
// every transaction committing before pos's, and pos's transaction's
// first pos.Events events, are in Kafka already and are skipped. A
// position of another server (a different system identifier, or another
// timeline: its LSNs need not mean the same WAL) is not applied, which
// may re-publish, never skip. A PostgreSQL checkpoint further ahead wins:
// by its position, or by the Partial of a later transaction (the
// position read from Kafka may be older than the checkpoint). A position
// past the server's WAL end is a *PositionAheadError: the server lost WAL
// the position covers (a restore), and applying it would skip the
// transactions committed there since. One that is applied is checked
// against the WAL before what it skips is confirmed (positionCheck): a
// restored server's WAL may have grown past it.
func (rs resumeState) withKafkaPosition(pos *kafkaPosition, key string, log *slog.Logger) (resumeState, error) {
	if pos == nil {
		return rs, nil
	}
	lsn, _ := pos.lsn()
	attrs := []any{slog.String("stage", "transaction"), slog.String("commit_lsn", pos.CommitLSN), slog.Int("events", pos.Events),
		slog.String("event_id", pos.EventID), slog.Int64("offset", pos.offset)}
	if pos.SystemID != rs.id.SystemID || pos.Timeline != rs.id.Timeline {
		log.Warn("the committed position in Kafka was written on another server or timeline: not applied, so events already in Kafka may be published again (duplicates, never loss)",
			append(attrs, slog.String("position_system_id", pos.SystemID), slog.Int64("position_timeline", int64(pos.Timeline)),
				slog.String("system_id", rs.id.SystemID), slog.Int64("timeline", int64(rs.id.Timeline)))...)
		return rs, nil
	}
	if rs.walEnd != 0 && lsn > rs.walEnd {
		return rs, &PositionAheadError{Key: key, LSN: lsn, WAL: rs.walEnd}
	}
	if rs.skipBefore > lsn || (!rs.partial.Empty() && rs.partial.CommitLSN > lsn) {
		log.Info("the PostgreSQL checkpoint is ahead of the committed position in Kafka; resuming from the checkpoint", attrs...)
		return rs, nil
	}
	part := checkpoint.Partial{CommitLSN: lsn, Events: pos.Events}
	if rs.partial.CommitLSN == lsn {
		part = part.Union(rs.partial)
	}
	rs.skipBefore, rs.partial, rs.kafka, rs.kafkaKey = lsn, part, pos, key
	log.Info("resuming after the committed position in Kafka: every event at or before it is skipped", attrs...)
	return rs, nil
}

// PositionAheadError is an exactly-once start whose committed position in
// Kafka lies past the server's WAL end, on the same system and timeline:
// the server lost WAL the position covers (restored from a backup or a
// disk snapshot), and the transactions committed since then reuse those
// LSNs. Applying the position would skip them, so the relay stops.
type PositionAheadError struct {
	// Key is the position record's key in the positions topic.
	Key string
	// LSN is the position's commit LSN, WAL the server's WAL end.
	LSN, WAL pglogrepl.LSN
}

func (e *PositionAheadError) Error() string {
	return fmt.Sprintf("the committed position in Kafka (key %q) is at %s, past the server's WAL end %s: the server lost WAL the position covers, "+
		"so applying it would skip events; check what happened, then write a tombstone (null value) under that key to the positions topic, "+
		"which makes the relay resume from its PostgreSQL checkpoint and slot", e.Key, e.LSN, e.WAL)
}

// movedPosition looks for the source's position in the n partitions of
// the positions topic other than part (already read; read reads one, as
// committedPosition): partitions added to the topic move a key to another
// partition, and the source's records stay where they were written until
// its next commit writes one where the key maps now. Without this the
// position would be lost, and the stream would re-publish from the slot
// or the PostgreSQL checkpoint: duplicates that read_committed consumers
// see. The record furthest in the source's stream wins (kafkaPosition.after);
// a tombstone found in another partition counts as none there, and a
// record not after have (the record of the key's own partition) is not
// returned. It reads each partition's tail, so it costs one read of every
// partition of a topic with no record of the source (its first start on a
// shared topic of several partitions).
func (r *Relay) movedPosition(ctx context.Context, n, part int, have *kafkaPosition, key string,
	read func(ctx context.Context, partition int) (*kafkaPosition, error)) (*kafkaPosition, error) {
	newest := have
	where := -1
	for p := range n {
		if p == part {
			// The legacy key's partition is read again: above, it was
			// read for the legacy key alone.
			continue
		}
		pos, err := read(ctx, p)
		if err != nil {
			return nil, err
		}
		if pos != nil && (newest == nil || pos.after(newest)) {
			newest, where = pos, p
		}
	}
	if newest == have {
		return nil, nil
	}
	if newest != nil {
		r.log.Warn("a newer position record of the source is in another partition of the positions topic than its key maps to: "+
			"partitions were added to the topic; resuming from it, and the next commit writes it where the key maps now",
			slog.String("stage", "transaction"), slog.String("topic", r.cfg.Publish.PositionsTopic), slog.Int("found_in", where),
			slog.Int("partition", part), slog.Int("partitions", n), slog.String("key", key))
	}
	return newest, nil
}

// after reports whether p is further in the source's stream than q: on a
// later timeline (a promoted standby's continues its primary's), or on the
// same one at a later commit LSN, or in the same transaction past more of
// its events. Never by CommittedAt, the clock of the relay that wrote
// the record: two leaders' clocks differ, and with the one that wrote the
// older record ahead, the older position would win and its events be
// published again. Both were read by a positionScan, so their LSNs parse.
func (p *kafkaPosition) after(q *kafkaPosition) bool {
	if p.Timeline != q.Timeline {
		return p.Timeline > q.Timeline
	}
	pl, _ := p.lsn()
	ql, _ := q.lsn()
	if pl != ql {
		return pl > ql
	}
	return p.Events > q.Events
}

// beginTransactions takes the transactional producer id, which fences
// every earlier leader's producer, then reads the committed position of
// src and applies it to rs.
func (r *Relay) beginTransactions(ctx context.Context, pub *publisher.Publisher, rs resumeState, src Source) (resumeState, error) {
	top, err := positions.Begin(ctx, pub)
	if err != nil {
		var kerr kafka.Error
		if errors.As(err, &kerr) && (kerr == kafka.TransactionalIDAuthorizationFailed || kerr == kafka.InvalidTransactionTimeout ||
			kerr == kafka.ClusterAuthorizationFailed) {
			// The configuration or the ACLs: no retry can fix it.
			return rs, poison.Permanent(err)
		}
		if errors.Is(err, kafka.TopicAuthorizationFailed) {
			return rs, poison.Permanent(fmt.Errorf("%w; the relay's principal may not describe or create the positions topic %s: "+
				"grant it DESCRIBE, READ and WRITE on the topic, and create the topic (1 partition, cleanup.policy=compact) or grant CREATE "+
				"(docs/managed-kafka.md)", err, r.cfg.Publish.PositionsTopic))
		}
		return rs, err
	}
	key, legacy := []byte(src.PositionKey()), []byte(src.legacyPositionKey())
	part := top.Partition
	var pos *kafkaPosition
	var found bool
	lp := top.PartitionOf(legacy)
	if lp == part {
		pos, found, err = r.committedPosition(ctx, part, src, [][]byte{key, legacy})
	} else {
		// A positions topic of several partitions: the legacy records
		// are in another one, and count only while the source has
		// none of its own.
		if pos, found, err = r.committedPosition(ctx, part, src, [][]byte{key}); err == nil && !found {
			pos, found, err = r.committedPosition(ctx, lp, src, [][]byte{legacy})
		}
	}
	// Partitions added to the topic since the record was written move
	// the key: the source's newest record may be in another partition.
	if n := top.Partitions; err == nil && n > 1 && (!found || pos != nil && pos.Partitions != 0 && pos.Partitions != n) {
		read := func(ctx context.Context, p int) (*kafkaPosition, error) {
			pos, _, err := r.committedPosition(ctx, p, src, [][]byte{key, legacy})
			return pos, err
		}
		var moved *kafkaPosition
		if moved, err = r.movedPosition(ctx, n, part, pos, src.PositionKey(), read); moved != nil {
			pos = moved
		}
	}
	if errors.Is(err, kafka.TopicAuthorizationFailed) {
		// Without READ the position read fails the same way on every
		// start: reconnecting for ever would look alive and deliver
		// nothing.
		return rs, poison.Permanent(fmt.Errorf("%w; the relay's principal may not read the positions topic %s, where exactly-once "+
			"finds where to resume: grant it READ and DESCRIBE on the topic (docs/managed-kafka.md)", err, r.cfg.Publish.PositionsTopic))
	}
	if err != nil {
		return rs, err
	}
	rs, err = rs.withKafkaPosition(pos, src.PositionKey(), r.log)
	if err != nil {
		return rs, poison.Permanent(err)
	}
	return rs, nil
}
