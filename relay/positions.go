package relay

// This file holds the exactly-once mode's source position in Kafka: every
// Kafka transaction of the publisher (publisher.TransactionConfig) ends
// with a record in Publish.PositionsTopic, keyed by slot, naming the last
// event it covers. The record commits with the events or not at all, so
// the newest committed one is exactly how far Kafka holds the stream. A
// stream start reads it read_committed, after its InitProducerId fenced
// (and so completed or aborted) every earlier transaction, and skips
// every event at or before it; the PostgreSQL checkpoint stays a second,
// conservative record of the same position.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/kafkafetch"
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
	// offset is the record's offset in the positions partition (not
	// stored).
	offset int64
}

// lsn is the position's commit LSN.
func (p *kafkaPosition) lsn() (pglogrepl.LSN, error) {
	return pglogrepl.ParseLSN(p.CommitLSN)
}

// transactionConfig is the publisher's exactly-once configuration for a
// stream on the server id; nil for at-least-once.
func (r *Relay) transactionConfig(id checkpoint.Identity) *publisher.TransactionConfig {
	p := r.cfg.Publish
	if p.Delivery != ExactlyOnce {
		return nil
	}
	slotName := r.cfg.Database.Slot
	key := []byte(slotName)
	return &publisher.TransactionConfig{
		ID: r.cfg.TransactionalID(), Interval: p.TransactionInterval, Timeout: p.TransactionTimeout,
		// Half the window each: the next range fills while one commits.
		MaxEvents: max(r.cfg.Window.MaxEvents/2, 1), MaxBytes: int(max(r.cfg.Window.MaxBytes/2, 1)),
		PositionsTopic: p.PositionsTopic, PositionKey: key,
		Position: func(last *replication.Event) []byte {
			v, _ := json.Marshal(kafkaPosition{Version: 1, Slot: slotName, SystemID: id.SystemID, Timeline: id.Timeline,
				CommitLSN: last.TxLSN.String(), Events: last.Ordinal + 1, EventID: last.EventID, CommittedAt: time.Now().UTC()})
			return v
		},
	}
}

// positionScanStart is how many offsets before the partition's end the
// newest position record is looked for first; each further pass looks
// four times as far back.
const positionScanStart = 1000

// committedPosition returns the newest committed position record of the
// slot in partition of the positions topic, nil when there is none. It
// reads backwards from the last stable offset, a window at a time, so a
// start costs a few fetches however long the uncompacted tail.
func (r *Relay) committedPosition(ctx context.Context, partition int) (*kafkaPosition, error) {
	topic := r.cfg.Publish.PositionsTopic
	client, closeIdle := r.cfg.Kafka.Client("outbox-relay", 10*time.Second)
	defer closeIdle()
	res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		IsolationLevel: kafka.ReadCommitted,
		Topics: map[string][]kafka.OffsetRequest{topic: {
			kafka.FirstOffsetOf(partition), kafka.LastOffsetOf(partition),
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("positions topic %s: list offsets: %w", topic, err)
	}
	var first, end int64 = -1, -1
	for _, po := range res.Topics[topic] {
		if po.Partition != partition {
			continue
		}
		if po.Error != nil {
			return nil, fmt.Errorf("positions topic %s[%d]: list offsets: %w", topic, partition, po.Error)
		}
		first, end = po.FirstOffset, po.LastOffset
	}
	if first < 0 || end < 0 {
		return nil, fmt.Errorf("positions topic %s[%d]: no offsets in the answer", topic, partition)
	}
	for window := int64(positionScanStart); end > first; window *= 4 {
		start := max(first, end-window)
		pos, err := r.scanPositions(ctx, partition, start, end)
		if err != nil || pos != nil {
			return pos, err
		}
		end = start
	}
	return nil, nil
}

// scanPositions returns the last position record of the slot committed
// in [start, end) of partition, nil when there is none.
func (r *Relay) scanPositions(ctx context.Context, partition int, start, end int64) (*kafkaPosition, error) {
	topic := r.cfg.Publish.PositionsTopic
	rd, err := kafkafetch.New(kafkafetch.Config{
		Brokers: r.cfg.Kafka.Brokers, Dialer: r.cfg.Kafka.Dialer("outbox-relay"),
		Topic: topic, Partition: partition, Offset: start, End: end, MaxWait: 100 * time.Millisecond,
		Logger: r.log,
	})
	if err != nil {
		return nil, fmt.Errorf("positions topic %s[%d]: %w", topic, partition, err)
	}
	defer rd.Close()
	key := []byte(r.cfg.Database.Slot)
	var last *kafkaPosition
	for {
		// The range ends at a last stable offset: every record before it
		// is decided, so the reader reaches End (io.EOF) without waiting.
		m, err := rd.FetchMessage(ctx)
		if errors.Is(err, io.EOF) {
			return last, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("positions topic %s[%d]: %w", topic, partition, err)
		}
		if m.Offset >= end {
			return last, nil
		}
		if !bytes.Equal(m.Key, key) || len(m.Value) == 0 {
			continue
		}
		var pos kafkaPosition
		if err := json.Unmarshal(m.Value, &pos); err != nil {
			return nil, fmt.Errorf("positions topic %s[%d] offset %d: not a position record: %w", topic, partition, m.Offset, err)
		}
		if _, err := pos.lsn(); err != nil {
			return nil, fmt.Errorf("positions topic %s[%d] offset %d: %w", topic, partition, m.Offset, err)
		}
		pos.offset = m.Offset
		last = &pos
	}
}

// withKafkaPosition is rs with the exactly-once position pos applied:
// every transaction committing before pos's, and pos's transaction's
// first pos.Events events, are in Kafka already and are skipped. A
// position of another server (a different system identifier, or another
// timeline: its LSNs need not mean the same WAL) is not applied, which
// may re-publish, never skip; a PostgreSQL checkpoint further ahead wins.
func (rs resumeState) withKafkaPosition(pos *kafkaPosition, log *slog.Logger) resumeState {
	if pos == nil {
		return rs
	}
	lsn, _ := pos.lsn()
	attrs := []any{slog.String("stage", "transaction"), slog.String("commit_lsn", pos.CommitLSN), slog.Int("events", pos.Events),
		slog.String("event_id", pos.EventID), slog.Int64("offset", pos.offset)}
	if pos.SystemID != rs.id.SystemID || pos.Timeline != rs.id.Timeline {
		log.Warn("the committed position in Kafka was written on another server or timeline: not applied, so events already in Kafka may be published again (duplicates, never loss)",
			append(attrs, slog.String("position_system_id", pos.SystemID), slog.Int64("position_timeline", int64(pos.Timeline)),
				slog.String("system_id", rs.id.SystemID), slog.Int64("timeline", int64(rs.id.Timeline)))...)
		return rs
	}
	if rs.skipBefore > lsn {
		log.Info("the PostgreSQL checkpoint is ahead of the committed position in Kafka; resuming from the checkpoint", attrs...)
		return rs
	}
	part := checkpoint.Partial{CommitLSN: lsn, Events: pos.Events}
	if rs.partial.CommitLSN == lsn {
		part = part.Union(rs.partial)
	}
	rs.skipBefore, rs.partial = lsn, part
	log.Info("resuming after the committed position in Kafka: every event at or before it is skipped", attrs...)
	return rs
}

// beginTransactions takes the transactional producer id, which fences
// every earlier leader's producer, then reads the committed position and
// applies it to rs.
func (r *Relay) beginTransactions(ctx context.Context, pub *publisher.Publisher, rs resumeState) (resumeState, error) {
	if err := pub.Begin(ctx); err != nil {
		var kerr kafka.Error
		if errors.As(err, &kerr) && (kerr == kafka.TransactionalIDAuthorizationFailed || kerr == kafka.InvalidTransactionTimeout ||
			kerr == kafka.ClusterAuthorizationFailed) {
			// The configuration or the ACLs: no retry can fix it.
			return rs, poison.Permanent(err)
		}
		return rs, err
	}
	pos, err := r.committedPosition(ctx, pub.PositionPartition())
	if err != nil {
		return rs, err
	}
	return rs.withKafkaPosition(pos, r.log), nil
}
