package publisher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/rawproduce"

	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
)

// Class says whether retrying a failed write can succeed.
type Class string

// Error classes.
const (
	Transient Class = "transient"
	Permanent Class = "permanent"
	// Fatal failures concern the relay, not an event (credentials,
	// cluster authorization): dead-lettering would quarantine every
	// aggregate, so the relay stops with the slot position held.
	Fatal Class = "fatal"
)

// classify sorts a write failure and names its reason for logs and
// metrics. Unknown failures count as transient: retrying with backoff
// risks a duplicate, giving up risks a loss (the stall detector of `run`
// makes a retry that never ends visible).
//
// The rule behind each Kafka code (docs/errors.md has the table):
//   - Permanent: this event can never be accepted by its topic or
//     partition. Dead-lettering it and quarantining its aggregate keeps
//     the aggregate's order and lets every other aggregate flow.
//   - Fatal: the relay's identity, configuration or the cluster's
//     settings are wrong, so every event would fail alike. Dead-lettering
//     would empty the stream into the dead-letter table; stopping with
//     the slot position held loses nothing and reorders nothing, and the
//     error says what to fix.
//   - Transient: the cluster can heal by itself (leaders, replicas,
//     quotas, timeouts).
func classify(err error) (Class, string) {
	// An unverifiable certificate or rejected credentials concern every
	// event: the relay stops (slot held) with a message naming the fix.
	if f := kafkaconn.Classify(err); f != kafkaconn.FailureNone {
		return Fatal, string(f)
	}
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return Permanent, "message_too_large"
	}
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) {
		for _, e := range werrs {
			if e != nil {
				return classify(e)
			}
		}
	}
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return classifyCode(kerr), codeReason(kerr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Transient, "timeout"
	}
	var nerr net.Error
	if errors.As(err, &nerr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return Transient, "network"
	}
	return Transient, "other"
}

// codeReason is the metric reason of a Kafka error code: its title in
// snake_case ("Leader Not Available" -> leader_not_available), like every
// other reason, so label values need no quoting in PromQL and read the
// same in logs, metrics and dead-letter rows. A code kafka-go has no title
// for is kafka_error_<code> (still bounded: codes are small integers).
func codeReason(code kafka.Error) string {
	if code == kafkaproduce.ErrOperationNotAttempted { // kafka-go's title is wrong (see classifyCode)
		return "operation_not_attempted"
	}
	if r := snakeCase(code.Title()); r != "" {
		return r
	}
	return fmt.Sprintf("kafka_error_%d", int(code))
}

// snakeCase lower-cases s and turns every run of other characters than
// ASCII letters and digits into one underscore, trimmed at both ends.
func snakeCase(s string) string {
	var b strings.Builder
	sep := false
	for _, c := range strings.ToLower(s) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			if sep && b.Len() > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(c)
			sep = false
			continue
		}
		sep = true
	}
	return b.String()
}

// classifyCode is the class of a Kafka error code.
func classifyCode(code kafka.Error) Class {
	switch code {
	// The record itself: its size, its topic's name, its shape, or what
	// its topic allows (per-topic authorization and message format are
	// per topic, and the topic is chosen per event).
	case kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidTopic,
		kafka.InvalidRecord, kafka.TopicAuthorizationFailed, kafka.UnsupportedForMessageFormat:
		return Permanent
	// The relay's credentials and acks setting.
	case kafka.ClusterAuthorizationFailed, kafka.SASLAuthenticationFailed, kafka.UnsupportedSASLMechanism,
		kafka.IllegalSASLState, kafka.InvalidRequiredAcks, kafka.TransactionalIDAuthorizationFailed,
		kafka.SecurityDisabled:
		return Fatal
	// kafka-go names code 55 BrokerAuthorizationFailed; Kafka's 55 is
	// OPERATION_NOT_ATTEMPTED: this part of a request was held back
	// because another part failed. Retrying without the other part
	// succeeds, so it is transient (the default below), never a reason
	// to stop or to dead-letter.
	case kafkaproduce.ErrOperationNotAttempted:
		return Transient
	// Record timestamps are commit times, from PostgreSQL's clock: a
	// rejected one means the topic's message.timestamp.before.max.ms /
	// after.max.ms or a clock skew, which every event of that age hits
	// alike. Dead-lettering a whole old backlog would quarantine every
	// aggregate in it; retrying cannot succeed while the configuration
	// stands (and waiting makes a backlog older).
	case kafka.InvalidTimestamp:
		return Fatal
	// Protocol: the broker does not understand what the relay sends.
	case kafka.UnsupportedVersion, kafka.InvalidRequest, kafka.UnsupportedCompressionType:
		return Fatal
	// Producer identity. With idempotence (the default) the lane takes a
	// new producer id for the answers producerIDRefused names before it
	// classifies (see lane.send); without it, or for transactions the
	// relay never uses, an answer about a producer id means a broken peer.
	case kafka.InvalidProducerEpoch, kafka.InvalidProducerIDMapping, kafka.ProducerFenced,
		kafka.InvalidTransactionState, kafka.TransactionCoordinatorFenced, kafka.OutOfOrderSequenceNumber,
		kafka.DuplicateSequenceNumber, kafka.UnknownProducerId, kafka.TransactionalIDNotFound:
		return Fatal
	// Topic creation (--create-topics) refused by the cluster's policy or
	// for settings it never accepts.
	case kafka.PolicyViolation, kafka.InvalidPartitionNumber, kafka.InvalidConfiguration, kafka.InvalidReplicaAssignment:
		return Fatal
	}
	// Leaders, replicas (NOT_ENOUGH_REPLICAS*), storage, quotas, timeouts,
	// CORRUPT_MESSAGE (a CRC mismatch in transit), INVALID_REPLICATION_FACTOR
	// (fewer brokers up than the factor) and UNKNOWN_TOPIC_OR_PARTITION
	// (see lingering) heal; so may anything nobody classified.
	return Transient
}

// lingering reports whether err is retriable at first but means, once
// it lasts, that no retry can succeed: UNKNOWN_TOPIC_OR_PARTITION on a
// partition the relay already routes to. Right after a topic is created,
// or while a broker's metadata lags, it heals within seconds; when it
// lasts, the partition is gone (topic deleted). Sending its events to
// another partition would reorder their aggregates, and dead-lettering
// would quarantine a whole partition's aggregates, so the relay stops
// with the slot position held after --unknown-topic-timeout.
func lingering(err error) bool {
	return errors.Is(err, kafka.UnknownTopicOrPartition) || errors.Is(err, kafka.UnknownTopicID)
}

// healing reports whether err is what a partition leader's move looks
// like from the producer: the old leader refuses (NOT_LEADER_OR_FOLLOWER),
// is unreachable or times out, no leader is elected yet, or the leader
// waits for a dead follower to leave the in-sync replicas. Each heals
// once the controller has fenced the dead broker and the metadata shows
// the new leader (see Publisher.beforeRetry).
func healing(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		switch kerr {
		case kafka.NotLeaderForPartition, kafka.LeaderNotAvailable, kafka.BrokerNotAvailable, kafka.RequestTimedOut,
			kafka.NotEnoughReplicas, kafka.NotEnoughReplicasAfterAppend, kafka.NetworkException, kafka.FencedLeaderEpoch,
			kafka.UnknownLeaderEpoch, kafka.KafkaStorageError:
			return true
		}
		return false
	}
	var noRoute *rawproduce.Error // kafka-go's metadata has no leader for the partition
	if errors.As(err, &noRoute) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var nerr net.Error
	return errors.As(err, &nerr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// producerIDRefused reports whether the broker refused a batch because
// of its producer id, epoch or sequence number: the producer state
// expired (UNKNOWN_PRODUCER_ID), the epoch is not the broker's
// (INVALID_PRODUCER_EPOCH), the batch does not follow the partition's
// last one (OUT_OF_ORDER_SEQUENCE_NUMBER: the broker lost records, e.g.
// through an unclean election), or the id is unknown altogether. A new
// producer id cures each (see producer).
func producerIDRefused(err error) bool {
	return errors.Is(err, kafka.OutOfOrderSequenceNumber) || errors.Is(err, kafka.UnknownProducerId) ||
		errors.Is(err, kafka.InvalidProducerEpoch) || errors.Is(err, kafka.InvalidProducerIDMapping)
}

// fix names what an operator must change for a fatal Kafka error; empty
// when it has no Kafka code (TLS and SASL failures get their fix from
// kafkaconn's classification in cmd/outbox-relay). Like every message of
// the module's libraries it names the relay.Config field to change
// (Publish.UnknownTopicTimeout); the binary shows its flags instead.
func fix(err error) string {
	if lingering(err) {
		return "the partition stayed unknown past Publish.UnknownTopicTimeout, so it no longer exists (topic deleted, or recreated " +
			"with fewer partitions): recreate the topic with at least as many partitions; the relay resumes from the held position"
	}
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return ""
	}
	switch kerr {
	case kafka.InvalidTimestamp:
		return "the broker refuses the record's timestamp (the event's commit time): raise the topic's " +
			"message.timestamp.before.max.ms (an old backlog) or check the clocks of PostgreSQL and Kafka " +
			"(message.timestamp.after.max.ms), or set message.timestamp.type=LogAppendTime on the topic"
	case kafka.ClusterAuthorizationFailed, kafka.TransactionalIDAuthorizationFailed, kafka.BrokerAuthorizationFailed:
		return "grant the relay's principal the ACLs it needs (WRITE and DESCRIBE on its topics, CREATE with Publish.CreateTopics; " +
			"the idempotent producer's InitProducerId needs IDEMPOTENT_WRITE on the cluster before Kafka 3.0, or set Publish.NoIdempotence)"
	case kafka.InvalidRequiredAcks:
		return "the broker refuses acks=all: check the broker version and its configuration"
	case kafka.SecurityDisabled:
		return "the listener has no security enabled: drop Kafka.SASL or point Kafka.Brokers at a SASL listener"
	case kafka.UnsupportedVersion, kafka.InvalidRequest, kafka.UnsupportedCompressionType:
		return "the broker does not understand the relay's produce request: upgrade the broker (Kafka 2.1 or later) or check what sits between relay and broker"
	case kafka.PolicyViolation, kafka.InvalidPartitionNumber, kafka.InvalidConfiguration, kafka.InvalidReplicaAssignment:
		return "the cluster refuses the topic the relay creates: adjust Publish.TopicPartitions / Publish.TopicReplicationFactor " +
			"to its policy, or create the topics yourself and run without Publish.CreateTopics"
	}
	if classifyCode(kerr) == Fatal {
		return "the broker answered about a producer id or transaction the relay never uses: check the broker and anything proxying it"
	}
	return ""
}

// fatalError builds the error a lane (or, with partition -1, a topic
// lookup) stops the relay with: where, why, and what to fix.
func fatalError(topic string, partition int, reason string, err error) error {
	where := fmt.Sprintf("publish to %s[%d]", topic, partition)
	if partition < 0 {
		where = "topic " + topic
	}
	if h := fix(err); h != "" {
		return fmt.Errorf("%s: %s: %w; fix: %s", where, reason, err, h)
	}
	return fmt.Errorf("%s: %s: %w", where, reason, err)
}

// Failure is one failed Kafka write or topic lookup, for the stall
// report of `run`: the cause it names when acknowledgements stop.
type Failure struct {
	At        time.Time
	Class     Class
	Reason    string
	Topic     string
	Partition int // -1 for a topic lookup
	Attempt   int
	// EventID, AggregateID and EventType are those of the first event of
	// the failed batch (empty for a topic lookup).
	EventID, AggregateID, EventType string
	Err                             error
}
