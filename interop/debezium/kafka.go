package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"
)

// partitions of every topic the run creates (both sides alike, so the
// same key lands in the same partition number on both).
const partitions = 6

func kafkaClient(brokers []string) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 20 * time.Second}
}

// createTopics creates topics with `partitions` partitions and waits
// until every partition has a leader that lists its offsets.
func createTopics(ctx context.Context, c *kafka.Client, topics []string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req := &kafka.CreateTopicsRequest{}
	for _, t := range topics {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: 1})
	}
	resp, err := c.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for t, e := range resp.Errors {
		if e != nil && !errors.Is(e, kafka.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t, e)
		}
	}
	for {
		if _, err := endOffsets(ctx, c, topics); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v not ready: %w", topics, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// deleteTopics deletes topics; a missing one is no error.
func deleteTopics(ctx context.Context, c *kafka.Client, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: topics})
	if err != nil {
		return err
	}
	var errs []error
	for t, e := range resp.Errors {
		if e != nil && !errors.Is(e, kafka.UnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("delete topic %s: %w", t, e))
		}
	}
	return errors.Join(errs...)
}

// endOffsets are the high watermarks of every partition of topics.
func endOffsets(ctx context.Context, c *kafka.Client, topics []string) (map[string][]int64, error) {
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, t := range topics {
		for p := range partitions {
			req.Topics[t] = append(req.Topics[t], kafka.LastOffsetOf(p))
		}
	}
	resp, err := c.ListOffsets(ctx, req)
	if err != nil {
		return nil, err
	}
	out := map[string][]int64{}
	for _, t := range topics {
		pos := resp.Topics[t]
		if len(pos) != partitions {
			return nil, fmt.Errorf("topic %s: offsets of %d partitions", t, len(pos))
		}
		offs := make([]int64, partitions)
		for _, po := range pos {
			if po.Error != nil {
				return nil, fmt.Errorf("topic %s partition %d: %w", t, po.Partition, po.Error)
			}
			offs[po.Partition] = po.LastOffset
		}
		out[t] = offs
	}
	return out, nil
}

// countRecords is the number of records in topics (the topics are new
// and never compacted or truncated, so the end offsets count them).
func countRecords(ctx context.Context, c *kafka.Client, topics []string) (int64, error) {
	offs, err := endOffsets(ctx, c, topics)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, o := range offs {
		for _, x := range o {
			n += x
		}
	}
	return n, nil
}

// rawRecord is a Kafka record as read back.
type rawRecord struct {
	Topic     string
	Partition int
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []kafka.Header
	Time      time.Time
}

// message is r as kafka-go's consumer hands it over (for record.Decode).
func (r *rawRecord) message() kafka.Message {
	return kafka.Message{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Headers: r.Headers, Time: r.Time}
}

// readAll reads every record of topics: the partitions at the same time,
// each in offset order; the result is ordered by topic, partition and
// offset.
func readAll(ctx context.Context, c *kafka.Client, topics []string) ([]rawRecord, error) {
	offs, err := endOffsets(ctx, c, topics)
	if err != nil {
		return nil, err
	}
	topics = append([]string(nil), topics...)
	sort.Strings(topics)
	parts := make([][]rawRecord, len(topics)*partitions)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for ti, t := range topics {
		for p, end := range offs[t] {
			if end == 0 {
				continue
			}
			g.Go(func() error {
				recs, err := readPartition(gctx, c, t, p, end)
				parts[ti*partitions+p] = recs
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []rawRecord
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, nil
}

// readPartition reads offsets [0, end) of one partition with fetch
// requests: unlike kafka-go's Reader, the protocol records keep a null
// key, value or header value apart from an empty one (a tombstone's null
// value is what the comparison must see).
func readPartition(ctx context.Context, c *kafka.Client, topic string, partition int, end int64) ([]rawRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out := make([]rawRecord, 0, end)
	for next := int64(0); next < end; {
		resp, err := c.Fetch(ctx, &kafka.FetchRequest{
			Topic: topic, Partition: partition, Offset: next,
			MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 500 * time.Millisecond,
		})
		if err == nil && resp.Error != nil {
			err = resp.Error
		}
		if err != nil {
			return nil, fmt.Errorf("fetch %s/%d at offset %d of %d: %w", topic, partition, next, end, err)
		}
		for {
			rec, err := resp.Records.ReadRecord()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("read %s/%d at offset %d: %w", topic, partition, next, err)
			}
			if rec.Offset < next || rec.Offset >= end {
				continue
			}
			x := rawRecord{Topic: topic, Partition: partition, Offset: rec.Offset, Time: rec.Time}
			if x.Key, err = readBytes(rec.Key); err == nil {
				x.Value, err = readBytes(rec.Value)
			}
			if err != nil {
				return nil, err
			}
			for _, h := range rec.Headers {
				var v []byte
				if h.Value != nil {
					v = append([]byte{}, h.Value...)
				}
				x.Headers = append(x.Headers, kafka.Header{Key: h.Key, Value: v})
			}
			out = append(out, x)
			next = rec.Offset + 1
		}
	}
	return out, nil
}

// readBytes copies a record's key or value: nil for null, a non-nil
// slice (maybe empty) otherwise.
func readBytes(b kafka.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	defer b.Close()
	out := make([]byte, 0, b.Len())
	buf := bytes.NewBuffer(out)
	if _, err := buf.ReadFrom(b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
