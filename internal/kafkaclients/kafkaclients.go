// Package kafkaclients builds every Kafka client of the relay and of the
// binary's commands from the one Kafka configuration
// (publisher.KafkaConfig, which relay.KafkaConfig is), so that TLS and
// SASL apply to all of them: a client built by hand talks PLAINTEXT and
// fails against a SASL_SSL listener. It also builds every publisher, so
// run, replay, recover and dlq write with the same settings, the same
// reserved topics and the same producer.
package kafkaclients

import (
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/internal/schemareg"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
)

// security is k's TLS and SASL for package kafkaconn.
func security(k publisher.KafkaConfig) kafkaconn.Security {
	return kafkaconn.Security{TLS: k.TLS, SASL: k.SASL, SessionLifetime: k.SessionLifetime}
}

// Transport returns a kafka.Transport (for kafka.Client and kafka.Writer)
// with k's TLS, SASL and MetadataTTL, a 5 s dial timeout and clientID as
// the client ID brokers log and quota by. With SASL it recycles its
// connections before their sessions end (SessionLifetime), telling
// recycled (if set) each time.
func Transport(k publisher.KafkaConfig, clientID string, recycled func(sessionEnd time.Time)) *kafka.Transport {
	if recycled == nil {
		return security(k).Transport(clientID, 5*time.Second, k.MetadataTTL)
	}
	return security(k).TransportNotify(clientID, 5*time.Second, k.MetadataTTL, recycled)
}

// Dialer returns a kafka.Dialer (for kafka.Conn and kafka.Reader) with k's
// TLS and SASL and a 10 s timeout.
func Dialer(k publisher.KafkaConfig, clientID string) *kafka.Dialer {
	return security(k).Dialer(clientID, 10*time.Second)
}

// Client returns a kafka.Client over k's brokers whose requests and dials
// time out after timeout, and the function that closes its idle
// connections.
func Client(k publisher.KafkaConfig, clientID string, timeout time.Duration) (*kafka.Client, func()) {
	tr := security(k).Transport(clientID, timeout, k.MetadataTTL)
	return &kafka.Client{Addr: kafka.TCP(k.Brokers...), Timeout: timeout, Transport: tr}, tr.CloseIdleConnections
}

// Reader returns a kafka.Reader of rc over k's brokers, with k's Dialer
// (rc's Brokers and Dialer are replaced).
func Reader(k publisher.KafkaConfig, clientID string, rc kafka.ReaderConfig) *kafka.Reader {
	rc.Brokers = k.Brokers
	rc.Dialer = Dialer(k, clientID)
	return kafka.NewReader(rc)
}

// Publish is what every publisher is built from: the relay's Kafka and
// publish configuration (relay.Config.Kafka, relay.Config.Publish.Config
// and .PositionsTopic) and the client ID brokers see.
type Publish struct {
	Kafka          publisher.KafkaConfig
	Config         publisher.Config
	PositionsTopic string
	ClientID       string
	// Recycled, if set, is told of each recycle of the transport's
	// connections before a SASL session ends.
	Recycled func(sessionEnd time.Time)
	// Schemas is the registry of a registry format (Schemas builds it),
	// nil for the other formats.
	Schemas publisher.Schemas
}

// Schemas is the schema registry client of rc's format, nil for a format
// that needs none. Build one per relay or command and share it between
// its publishers: its cache is what keeps a stream going through a
// registry outage, and a stream restart must not lose it.
func Schemas(rc record.Config, opts ...schemareg.Option) (publisher.Schemas, error) {
	if f, err := record.ParseFormat(string(rc.Format)); err != nil || !f.Registry() {
		return nil, nil
	}
	c, err := schemareg.New(rc.Registry, opts...)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// options are the wiring every publisher shares: the transport of the
// one Kafka configuration, and the positions topic reserved in every
// delivery mode (another relay on the cluster may write exactly-once,
// and a row routed to its positions is a forgery).
func (p Publish) options(opts []publisher.Option) []publisher.Option {
	base := []publisher.Option{
		publisher.WithTransport(Transport(p.Kafka, p.ClientID, p.Recycled)),
		publisher.WithReservedTopics(p.PositionsTopic),
	}
	if p.Schemas != nil {
		base = append(base, publisher.WithSchemas(p.Schemas))
	}
	return append(base, opts...)
}

// Publisher is every asynchronous publisher of the relay and the binary:
// the stream's, the Kafka probe's, replay's and recover's back-fills.
// opts add the caller's own wiring (logger, metrics, dead letters,
// transactions).
func (p Publish) Publisher(opts ...publisher.Option) *publisher.Publisher {
	return publisher.New(p.Kafka.Brokers, p.Config, p.options(opts)...)
}

// SyncWriter is the synchronous writer of operator commands (dlq retry),
// built as Publisher's publishers are.
func (p Publish) SyncWriter(opts ...publisher.Option) *publisher.SyncWriter {
	return publisher.NewSyncWriter(p.Kafka.Brokers, p.Config, p.options(opts)...)
}
