package publisher

import (
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record"
)

// Config configures a Publisher.
type Config struct {
	Brokers  []string
	Template TopicTemplate
	// MaxBatch and MaxBatchBytes bound one partition batch (one produce
	// request). MaxBatchBytes must stay under the broker's
	// message.max.bytes, which applies to a whole record batch.
	MaxBatch      int
	MaxBatchBytes int
	// BackoffBase and BackoffMax bound the retry delay (full jitter).
	BackoffBase, BackoffMax time.Duration
	// CreateTopics creates missing topics with TopicPartitions and
	// TopicReplicationFactor (-1: the broker's default).
	CreateTopics           bool
	TopicPartitions        int
	TopicReplicationFactor int
	// WriteTimeout bounds one produce request.
	WriteTimeout time.Duration
	// Linger is how long a partition batch may wait for other
	// partitions' batches to share its produce request (see kafkaproduce.Sink);
	// 0 sends at once. It trades a few milliseconds of latency for far
	// fewer requests, which on a busy machine lowers the tail.
	Linger time.Duration
	// UnknownTopicTimeout is how long a missing topic (CreateTopics off)
	// is retried before its events count as poison.
	UnknownTopicTimeout time.Duration
	// MetadataRefresh is how often a topic's partition count is read
	// again, so added partitions get used (and a shrunk topic noticed).
	MetadataRefresh time.Duration
	// MetadataTimeout bounds each of the publisher's own metadata
	// questions (a topic's partitions and leaders, the positions topic's
	// partition count). They go to a broker, past kafka-go's cache of
	// Transport.MetadataTTL, so a slow or silent broker shows as a
	// failure that is logged and counted (Metrics.MetadataRefreshFailed)
	// instead of a stale layout kept without a word.
	MetadataTimeout time.Duration
	// TopicIdleTimeout is how long a partition lane, and then a topic's
	// router, may stay idle (nothing queued, nothing awaiting Kafka)
	// before it is removed: topics come from event data, so without
	// eviction goroutines and queues would grow with every topic ever
	// seen.
	TopicIdleTimeout time.Duration
	// DeadLetters takes poison and parked events; nil stops the publisher
	// on the first poison event.
	DeadLetters DeadLetters
	// Transport carries every request to the brokers, so its TLS, SASL,
	// ClientID, DialTimeout and MetadataTTL apply to all of them
	// (kafka-go does not refresh metadata on NotLeaderForPartition, so
	// MetadataTTL bounds the stall after a leader change). The publisher
	// only reads it: it sends through copies of it whose metadata cache
	// covers only the topics it writes to (MetadataTopics is replaced;
	// see kafka.md), a wider copy for each topic first seen, and
	// releases their connections on Close. nil: PLAINTEXT, client ID
	// "outbox-relay", a 5 s dial timeout and a 1 s MetadataTTL. The relay
	// builds it from its one Kafka configuration
	// (relay.KafkaConfig.Transport).
	Transport *kafka.Transport
	// LastFailure, if set, is told of every failed write and topic
	// lookup (the stall detector's cause); it may outlive the Publisher.
	LastFailure *LastFailure
	// Idempotent writes with the idempotent producer: a producer id
	// (InitProducerId) and, per partition, consecutive sequence numbers,
	// so the broker discards a retried batch it already stored and
	// refuses one out of order (see producer).
	Idempotent bool
	// Transactions, when set, writes exactly-once: in Kafka transactions
	// with a position record each (see TransactionConfig). It implies
	// Idempotent. Begin must succeed before the first Publish.
	Transactions *TransactionConfig
	// ReservedTopics are topics no event may be routed to, besides every
	// name that begins with "__" (Kafka's internal topics and, by
	// default, the relay's positions topic). The relay names its
	// positions topic here in every delivery mode: an outbox row routed
	// there by a template such as "{aggregate_type}" would be a forged
	// position, which makes a relay skip events at its next start. Such
	// an event is dead-lettered (reason reserved_topic).
	ReservedTopics []string
	// Record is the record format (native by default) and the tombstone
	// switch; New checks it (record.Config.Validate) and an invalid one
	// fails every Publish.
	Record record.Config
}

func (c *Config) defaults() {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1000
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 900 << 10
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = 100 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 10 * time.Second
	}
	if c.TopicPartitions <= 0 {
		c.TopicPartitions = 6
	}
	if c.TopicReplicationFactor == 0 {
		c.TopicReplicationFactor = -1
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.Transport == nil {
		c.Transport = &kafka.Transport{ClientID: "outbox-relay", DialTimeout: 5 * time.Second, MetadataTTL: time.Second}
	}
	if c.UnknownTopicTimeout <= 0 {
		c.UnknownTopicTimeout = time.Minute
	}
	if c.MetadataRefresh <= 0 {
		c.MetadataRefresh = time.Minute
	}
	if c.MetadataTimeout <= 0 {
		c.MetadataTimeout = 10 * time.Second
	}
	if c.TopicIdleTimeout <= 0 {
		c.TopicIdleTimeout = 2 * time.Minute
	}
}
