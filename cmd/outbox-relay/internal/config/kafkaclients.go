package config

import (
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaclients"
)

// Every Kafka client of every subcommand is built by package kafkaclients
// from the one Kafka configuration (config.Relay.Kafka), so that
// --kafka-tls* and --kafka-sasl-* apply to all of them (a client built by
// hand talks PLAINTEXT and fails against a SASL_SSL listener);
// kafkaclients_test.go keeps hand-built clients out of this package.

// KafkaClient returns a kafka.Client over the configured brokers and
// security, and the function that closes its idle connections.
func (c *Config) KafkaClient(clientID string, timeout time.Duration) (*kafka.Client, func()) {
	return kafkaclients.Client(c.Relay.Kafka, clientID, timeout)
}

// KafkaReader returns a kafka.Reader of rc over the configured brokers,
// secured like every other client (rc's Brokers and Dialer are set here).
func (c *Config) KafkaReader(clientID string, rc kafka.ReaderConfig) *kafka.Reader {
	return kafkaclients.Reader(c.Relay.Kafka, clientID, rc)
}

// Publish is what every publisher of a command (recover's and replay's
// back-fills, dlq's writer) is built from: the relay's Kafka and publish
// configuration and its positions topic, as the relay builds its own
// (kafkaclients.Publish), so a flag means the same to every command.
func (c *Config) Publish(clientID string) kafkaclients.Publish {
	// Validate checked the registry's settings: New cannot fail on them.
	schemas, _ := kafkaclients.Schemas(c.Relay.Publish.Record)
	return kafkaclients.Publish{Kafka: c.Relay.Kafka, Config: c.Relay.Publish.Config, PositionsTopic: c.Relay.Publish.PositionsTopic, ClientID: clientID,
		Schemas: schemas}
}
