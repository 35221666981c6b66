package config

import (
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/relay"
)

// Every Kafka client of every subcommand is built by relay.KafkaConfig from
// the one Kafka configuration (config.Relay.Kafka), so that --kafka-tls* and
// --kafka-sasl-* apply to all of them (a client built by hand talks
// PLAINTEXT and fails against a SASL_SSL listener); kafkaclients_test.go
// keeps hand-built clients out of this package.

// kafkaClient returns a kafka.Client over the configured brokers and
// security, and the function that closes its idle connections.
func (c *Config) KafkaClient(clientID string, timeout time.Duration) (*kafka.Client, func()) {
	return c.kafka().Client(clientID, timeout)
}

// kafkaReader returns a kafka.Reader of rc over the configured brokers,
// secured like every other client (rc's Brokers and Dialer are set here).
func (c *Config) KafkaReader(clientID string, rc kafka.ReaderConfig) *kafka.Reader {
	return c.kafka().Reader(clientID, rc)
}

// kafkaTransport returns a kafka.Transport for a publisher.Config (or a
// kafka.Writer), secured like every other client.
func (c *Config) KafkaTransport(clientID string) *kafka.Transport {
	return c.kafka().Transport(clientID)
}

// kafka is the one Kafka configuration the flags describe (validate
// builds its brokers, TLS and SASL); the relay and every client above take
// it from here.
func (c *Config) kafka() relay.KafkaConfig { return c.Relay.Kafka }
