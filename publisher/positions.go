package publisher

// This file holds where exactly-once mode writes its position records:
// the positions topic (created when missing) and the partition of the
// source's key in it.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
	"github.com/outbox-relay/outbox-relay/internal/positions"
)

// ensurePositionsTopic finds the position records' partition (by the
// Java client's murmur2 of the key), creating the topic when missing.
func (t *transactions) ensurePositionsTopic(ctx context.Context) error {
	key := t.cfg.PositionKey
	topic := t.cfg.PositionsTopic
	n, err := t.partitionCount(ctx, topic)
	if errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.p.cover(topic) // kafka-go's CreateTopics waits until its cache shows the topic
		res, cerr := t.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
			Topic: topic, NumPartitions: 1, ReplicationFactor: -1,
			ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "compact"}},
		}}})
		if cerr == nil {
			cerr = res.Errors[topic]
		}
		if cerr != nil && !errors.Is(cerr, kafka.TopicAlreadyExists) {
			return fmt.Errorf("create the positions topic %s: %w", topic, cerr)
		}
		t.p.log.Info("created the positions topic", slog.String("stage", "transaction"), slog.String("topic", topic))
		n, err = 0, nil
		for attempt := 1; n == 0 && attempt <= 50; attempt++ {
			if n, err = t.partitionCount(ctx, topic); err == nil && n > 0 {
				break
			}
			if !backoff.Sleep(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	if err != nil {
		return fmt.Errorf("positions topic %s: %w", topic, err)
	}
	if n <= 0 {
		return fmt.Errorf("positions topic %s: no partitions", topic)
	}
	t.positions, t.positionsCount = kafkaproduce.TopicPartition{Topic: topic, Partition: keyPartition(key, n)}, n
	t.seq = t.p.producer.Sequence(topic, t.positions.Partition)
	return nil
}

// partitionCount is topic's number of partitions, asked of a broker
// (askMetadata) rather than kafka-go's cache; a failure is logged and
// counted.
func (t *transactions) partitionCount(ctx context.Context, topic string) (int, error) {
	tp, err := t.p.askMetadata(ctx, topic)
	if err == nil && tp.ErrorCode != 0 {
		err = kafka.Error(tp.ErrorCode)
	}
	if errors.Is(err, kafka.UnknownTopicOrPartition) {
		return 0, err // the caller creates the topic, or waits for it to appear
	}
	if err != nil {
		_, reason := classify(err)
		t.p.m.MetadataRefreshFailed(reason)
		t.p.log.Warn("positions topic metadata unavailable", slog.String("stage", "transaction"), slog.String("topic", topic),
			slog.String("reason", reason), slog.Any("error", err))
		return 0, err
	}
	t.p.cover(topic)
	return len(tp.Partitions), nil
}

// keyPartition is the partition of key among n, by the Java client's
// murmur2, as for every record the publisher keys (positions.Partition,
// which the relay reads the positions topic by).
func keyPartition(key []byte, n int) int { return positions.Partition(key, n) }

// topic is the positions topic as begin found it (positions.Topic).
func (t *transactions) topic() positions.Topic {
	return positions.Topic{Partition: t.positions.Partition, Partitions: t.positionsCount}
}
