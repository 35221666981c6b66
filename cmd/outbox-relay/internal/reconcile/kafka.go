package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record"
)

// clockSlack is how far before the window's start a topic is read: record
// timestamps are commit times, never before created_at, and this covers
// clock differences between the relay and PostgreSQL.
const clockSlack = time.Minute

// readTopic streams the event ids of topic's records from the window's
// start to the current end of each partition into reconcile_seen.
func (r *run) readTopic(ctx context.Context, topic string) error {
	client, closeClient := r.deps.KafkaClient(clientID, 10*time.Second)
	defer closeClient()
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return fmt.Errorf("kafka metadata of %s: %w", topic, err)
	}
	var parts []int
	for _, t := range md.Topics {
		if t.Name == topic && t.Error == nil {
			for _, p := range t.Partitions {
				parts = append(parts, p.ID)
			}
		}
	}
	if len(parts) == 0 {
		return nil // no topic: every event of it is missing
	}
	at := r.rep.From.Add(-clockSlack)
	startRes, err := listOffsets(ctx, client, topic, offsetRequests(topic, parts, at))
	if err != nil {
		return fmt.Errorf("kafka offsets of %s by time: %w", topic, err)
	}
	endRes, err := listOffsets(ctx, client, topic, offsetRequests(topic, parts, time.Time{}))
	if err != nil {
		return fmt.Errorf("kafka end offsets of %s: %w", topic, err)
	}
	end := map[int]int64{}
	for _, po := range endRes.Topics[topic] {
		if po.Error != nil {
			return fmt.Errorf("kafka end offset of %s/%d: %w", topic, po.Partition, po.Error)
		}
		end[po.Partition] = po.LastOffset
	}
	for _, po := range startRes.Topics[topic] {
		if po.Error != nil {
			return fmt.Errorf("kafka offset of %s/%d at %s: %w", topic, po.Partition, at.Format(time.RFC3339), po.Error)
		}
		start := firstOffset(po.Offsets)
		if start < 0 || start >= end[po.Partition] {
			continue // nothing written since the window's start
		}
		if err := r.readPartition(ctx, topic, po.Partition, start, end[po.Partition]); err != nil {
			return err
		}
	}
	return nil
}

// listOffsets is client.ListOffsets, asked again (up to 8 times, 100 ms
// doubling to 2 s apart) while a partition answers a retriable error: a
// partition whose leader is moving, or whose new leader has not taken
// over yet (a topic just created), answers NOT_LEADER_OR_FOLLOWER or
// LEADER_NOT_AVAILABLE for a moment. Other errors stay in the response.
func listOffsets(ctx context.Context, client *kafka.Client, topic string, reqs map[string][]kafka.OffsetRequest) (*kafka.ListOffsetsResponse, error) {
	pause := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		res, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: reqs})
		if err != nil || attempt == 8 || !retriable(res.Topics[topic]) {
			return res, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// retriable reports whether a partition's answer is an error worth asking again.
func retriable(parts []kafka.PartitionOffsets) bool {
	for _, po := range parts {
		var ke kafka.Error
		if errors.As(po.Error, &ke) && ke.Temporary() {
			return true
		}
	}
	return false
}

// offsetRequests asks, per partition, for the first offset at time at, or
// for the end offset when at is zero.
func offsetRequests(topic string, parts []int, at time.Time) map[string][]kafka.OffsetRequest {
	rs := make([]kafka.OffsetRequest, len(parts))
	for i, p := range parts {
		if at.IsZero() {
			rs[i] = kafka.LastOffsetOf(p)
		} else {
			rs[i] = kafka.TimeOffsetOf(p, at)
		}
	}
	return map[string][]kafka.OffsetRequest{topic: rs}
}

// firstOffset is the smallest valid offset of a ListOffsets answer, -1
// when there is none (no record at or after the time asked for).
func firstOffset(offsets map[int64]time.Time) int64 {
	start := int64(-1)
	for off := range offsets {
		if off >= 0 && (start < 0 || off < start) {
			start = off
		}
	}
	return start
}

// eventIDOf returns the event id of m, if it carries a valid one: in any
// record format (record.Decode: the relay's --record-format), else its
// event_id header.
func eventIDOf(m kafka.Message) (uuid.UUID, bool) {
	if ev, err := record.Decode(m); err == nil {
		id, err := uuid.Parse(ev.ID)
		return id, err == nil
	}
	for _, h := range m.Headers {
		if h.Key == record.HeaderEventID {
			id, err := uuid.ParseBytes(h.Value)
			return id, err == nil
		}
	}
	return uuid.UUID{}, false
}

// readPartition copies the event ids of [start, end) into reconcile_seen in
// chunks, so memory does not depend on the window's size.
func (r *run) readPartition(ctx context.Context, topic string, partition int, start, end int64) error {
	rd := r.deps.KafkaReader(clientID, kafka.ReaderConfig{
		Topic: topic, Partition: partition,
		MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 250 * time.Millisecond, QueueCapacity: 100,
	})
	defer rd.Close()
	if err := rd.SetOffset(start); err != nil {
		return fmt.Errorf("kafka %s/%d: %w", topic, partition, err)
	}
	const chunk = 10000
	batch := make([][]any, 0, chunk)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := r.conn.CopyFrom(ctx, pgx.Identifier{"reconcile_seen"}, []string{"event_id"}, pgx.CopyFromRows(batch)); err != nil {
			return fmt.Errorf("store event ids: %w", err)
		}
		batch = batch[:0]
		return nil
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, r.cfg.ReadTimeout)
		m, err := rd.ReadMessage(rctx)
		cancel()
		if err != nil {
			return fmt.Errorf("kafka %s/%d: reading offset %d of [%d, %d): %w", topic, partition, rd.Offset(), start, end, err)
		}
		r.rep.Records++
		if id, ok := eventIDOf(m); ok {
			batch = append(batch, []any{id})
		}
		if len(batch) == chunk {
			if err := flush(); err != nil {
				return err
			}
		}
		if m.Offset >= end-1 {
			return flush()
		}
	}
}
