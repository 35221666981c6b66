package publisher

import (
	"crypto/tls"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"

	"github.com/outbox-relay/outbox-relay/record"
)

// Config is what a Publisher does: which topics its events go to, how
// they are batched, retried and encoded. It is the one declaration of
// these settings: relay.PublishConfig embeds it, so the relay, its tools
// and a program of your own read the same fields with the same defaults.
//
// A zero field means its default (DefaultConfig lists them); a knob that
// can be turned off is off when negative, as its doc says. Where the
// events go (the brokers, a transport, dead letters, transactions) is not
// configuration but wiring: New's arguments and Options.
type Config struct {
	// TopicTemplate names an event's topic; placeholders
	// {aggregate_type} and {event_type}. New parses it: an invalid one
	// fails every Publish (relay.Config.Validate reports it first).
	TopicTemplate string
	// CreateTopics creates missing topics with TopicPartitions and
	// TopicReplicationFactor (negative: the broker's default). Without it, a
	// missing topic is retried for UnknownTopicTimeout, then its events
	// are poison.
	CreateTopics           bool
	TopicPartitions        int
	TopicReplicationFactor int
	// MaxBatch and MaxBatchBytes bound one partition batch (one record
	// batch in a produce request); keep MaxBatchBytes under the broker's
	// message.max.bytes, which applies to a whole record batch.
	MaxBatch      int
	MaxBatchBytes int
	// Linger is how long a partition batch waits for other partitions'
	// batches to share its produce request (see kafkaproduce.Sink);
	// negative sends at once. It trades a few milliseconds of latency
	// for far fewer requests, which on a busy machine lowers the tail.
	Linger time.Duration
	// BackoffBase and BackoffMax bound the retry delay of a failed write
	// (exponential, full jitter). A partition retries inline: a later
	// batch never overtakes it.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// WriteTimeout bounds one produce request.
	WriteTimeout time.Duration
	// UnknownTopicTimeout is how long a missing topic is retried before
	// its events are poison (without CreateTopics), and how long a
	// partition that vanished is retried before the publisher fails.
	UnknownTopicTimeout time.Duration
	// PartitionRefresh is how often a topic's partition count is re-read;
	// added partitions are used once the topic's earlier events are
	// acknowledged, so no key is reordered (and a shrunk topic is
	// noticed).
	PartitionRefresh time.Duration
	// MetadataTimeout bounds each of the publisher's own metadata
	// questions (a topic's partitions and leaders, the positions topic's
	// partition count). They go to a broker, past kafka-go's cache of
	// KafkaConfig.MetadataTTL, so a slow or silent broker shows as a
	// failure that is logged and counted (Metrics.MetadataRefreshFailed)
	// instead of a stale layout kept without a word.
	MetadataTimeout time.Duration
	// TopicIdleTimeout is how long a partition lane, and then a topic's
	// router, may stay idle (nothing queued, nothing awaiting Kafka)
	// before it is removed: topics come from event data, so without
	// eviction goroutines and queues would grow with every topic ever
	// seen.
	TopicIdleTimeout time.Duration
	// NoIdempotence writes without the idempotent producer. By default
	// the publisher takes a producer id (InitProducerId) and numbers each
	// partition's batches, so the broker discards a retried batch it has
	// already stored (a produce request that timed out after the leader
	// wrote it) instead of storing it twice. Only for brokers or ACLs
	// that refuse it: InitProducerId needs IDEMPOTENT_WRITE on the
	// cluster before Kafka 3.0, WRITE on a topic since. Transactions
	// imply the idempotent producer.
	NoIdempotence bool
	// Record is the record format (docs/formats.md) and the tombstone
	// switch; New checks it (record.Config.Validate) and an invalid one
	// fails every Publish.
	Record record.Config
}

// DefaultConfig returns the defaults of every field, the values a zero
// field stands for.
func DefaultConfig() Config {
	return Config{
		TopicTemplate: DefaultTopicTemplate, TopicPartitions: 6, TopicReplicationFactor: -1,
		MaxBatch: 1000, MaxBatchBytes: 900 << 10, Linger: 5 * time.Millisecond,
		BackoffBase: 100 * time.Millisecond, BackoffMax: 10 * time.Second, WriteTimeout: 10 * time.Second,
		UnknownTopicTimeout: time.Minute, PartitionRefresh: time.Minute, MetadataTimeout: 10 * time.Second,
		TopicIdleTimeout: 2 * time.Minute,
		Record: record.Config{Format: record.FormatNative, CloudEventsMode: record.CloudEventsBinary,
			SubjectStrategy: record.SubjectTopic, SchemaVersion: record.VersionFromRow, Registry: record.DefaultRegistryConfig()},
	}
}

// WithDefaults is c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	def(&c.TopicTemplate, d.TopicTemplate)
	def(&c.TopicPartitions, d.TopicPartitions)
	def(&c.TopicReplicationFactor, d.TopicReplicationFactor)
	def(&c.MaxBatch, d.MaxBatch)
	def(&c.MaxBatchBytes, d.MaxBatchBytes)
	def(&c.Linger, d.Linger)
	def(&c.BackoffBase, d.BackoffBase)
	def(&c.BackoffMax, d.BackoffMax)
	def(&c.WriteTimeout, d.WriteTimeout)
	def(&c.UnknownTopicTimeout, d.UnknownTopicTimeout)
	def(&c.PartitionRefresh, d.PartitionRefresh)
	def(&c.MetadataTimeout, d.MetadataTimeout)
	def(&c.TopicIdleTimeout, d.TopicIdleTimeout)
	def(&c.Record.Format, d.Record.Format)
	def(&c.Record.CloudEventsMode, d.Record.CloudEventsMode)
	def(&c.Record.SubjectStrategy, d.Record.SubjectStrategy)
	def(&c.Record.SchemaVersion, d.Record.SchemaVersion)
	c.Record.Registry = c.Record.Registry.WithDefaults()
	return c
}

// def sets *v to d when it is the zero value.
func def[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// KafkaConfig is how every Kafka client reaches the brokers: the
// publisher's, and every other client the relay and its tools build, so
// that TLS and SASL apply to all of them alike (relay.KafkaConfig is this
// type).
type KafkaConfig struct {
	// Brokers are the bootstrap brokers, host:port each.
	Brokers []string
	// TLS secures every broker connection; nil means PLAINTEXT. It is
	// cloned per client (kafka-go sets ServerName per broker when empty).
	TLS *tls.Config
	// SASL authenticates every broker connection (kafka-go's
	// sasl/plain and sasl/scram packages build one, package oauthbearer
	// an OAUTHBEARER one from a token provider); nil means none.
	SASL sasl.Mechanism
	// SessionLifetime is how long the brokers keep an authenticated
	// session: their connections.max.reauth.ms, when set and shorter than
	// the tokens' lifetime (or with PLAIN and SCRAM, which have none).
	// Zero means sessions end only when a token expires. kafka-go cannot
	// re-authenticate a connection and the broker closes it at the first
	// request after its session ended, failing that request; so the
	// transports built from this configuration recycle their connections
	// at 80 % of the shorter of SessionLifetime and the token's remaining
	// life (oauthbearer.Expirer). Readers reconnect after the failure
	// instead.
	SessionLifetime time.Duration
	// MetadataTTL is how stale the clients' metadata may get. kafka-go
	// does not refresh it on NotLeaderForPartition, so this bounds the
	// stall after a partition leader change.
	MetadataTTL time.Duration
}

// config is a Publisher's whole configuration: the user's settings with
// their defaults, and the wiring New's arguments and options bring.
type config struct {
	Config
	// Brokers are the bootstrap brokers.
	Brokers []string
	// Template is Config.TopicTemplate, parsed.
	Template TopicTemplate
	// Idempotent is !NoIdempotence, or transactions.
	Idempotent bool
	// Transport carries every request to the brokers, so its TLS, SASL,
	// ClientID, DialTimeout and MetadataTTL apply to all of them. The
	// publisher only reads it: it sends through copies of it whose
	// metadata cache covers only the topics it writes to (see kafka.md).
	Transport *kafka.Transport
	// DeadLetters takes poison and parked events; nil fails the
	// publisher on the first poison event.
	DeadLetters DeadLetters
	// Transactions, when set, writes exactly-once.
	Transactions *TransactionConfig
	// ReservedTopics are topics no event may be routed to, besides
	// every name that begins with "__".
	ReservedTopics []string
	// failed, if set, is told of every failed write and topic lookup.
	failed func(Failure)
	// Schemas is the registry of the registry record formats.
	Schemas Schemas
}

// newConfig is cfg with its defaults, and the wiring of o.
func newConfig(brokers []string, cfg Config, o options) (config, error) {
	c := config{Config: cfg.WithDefaults(), Brokers: brokers, Transport: o.transport, DeadLetters: o.deadLetters,
		Transactions: o.transactions, ReservedTopics: o.reserved, failed: o.failed, Schemas: o.schemas}
	if c.Linger < 0 {
		c.Linger = 0
	}
	c.Idempotent = !c.NoIdempotence || c.Transactions != nil
	if c.Transport == nil {
		c.Transport = &kafka.Transport{ClientID: "outbox-relay", DialTimeout: 5 * time.Second, MetadataTTL: time.Second}
	}
	var err error
	c.Template, err = ParseTopicTemplate(c.TopicTemplate)
	return c, err
}

// recordFailure tells the failure hook of f, if there is one.
func (c *config) recordFailure(f Failure) {
	if c.failed != nil {
		c.failed(f)
	}
}
