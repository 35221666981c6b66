package benchkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// Partitions is the partition count of every topic a bench creates.
const Partitions = 6

// KafkaClient is the admin client of a bench's topics and consumer groups.
func KafkaClient(brokers []string) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 20 * time.Second}
}

// TopicReady says how long CreateTopic waits for a new topic.
type TopicReady int

const (
	// LeadersKnown waits until the metadata names a leader for every
	// partition.
	LeadersKnown TopicReady = iota
	// LeadersAnswer also waits until every partition's leader lists the
	// partition's offsets: a consumer started before that gets "Not Leader
	// For Partition" from a partition's reader and retries it after a
	// backoff, which would show in the first records' age.
	LeadersAnswer
)

// CreateTopic creates topic with Partitions partitions (replication
// factor 1; an existing topic is fine) and waits, for a minute at most,
// until it is ready.
func CreateTopic(ctx context.Context, c *kafka.Client, topic string, ready TopicReady) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := c.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: topic, NumPartitions: Partitions, ReplicationFactor: 1,
	}}})
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	if e := resp.Errors[topic]; e != nil && !errors.Is(e, kafka.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, e)
	}
	for {
		md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		if err == nil && len(md.Topics) == 1 && md.Topics[0].Error == nil && len(md.Topics[0].Partitions) == Partitions {
			leaders := true
			for _, p := range md.Topics[0].Partitions {
				leaders = leaders && p.Error == nil && p.Leader.Host != ""
			}
			if leaders && (ready == LeadersKnown || partitionsAnswer(ctx, c, topic) == nil) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topic %s has no leaders yet: %v", topic, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// partitionsAnswer is nil once every partition's leader lists its offsets.
func partitionsAnswer(ctx context.Context, c *kafka.Client, topic string) error {
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: nil}}
	for p := range Partitions {
		req.Topics[topic] = append(req.Topics[topic], kafka.FirstOffsetOf(p))
	}
	resp, err := c.ListOffsets(ctx, req)
	if err != nil {
		return err
	}
	if len(resp.Topics[topic]) != Partitions {
		return fmt.Errorf("offsets of %d partitions", len(resp.Topics[topic]))
	}
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			return po.Error
		}
	}
	return nil
}

// DeleteTopics deletes topics, waiting 30 s at most; a topic that does not
// exist is no error.
func DeleteTopics(ctx context.Context, c *kafka.Client, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: topics})
	if err != nil {
		return fmt.Errorf("delete topics %v: %w", topics, err)
	}
	var errs []error
	for t, e := range resp.Errors {
		if e != nil && !errors.Is(e, kafka.UnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("delete topic %s: %w", t, e))
		}
	}
	return errors.Join(errs...)
}
