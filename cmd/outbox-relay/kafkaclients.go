package main

import (
	"time"

	"github.com/segmentio/kafka-go"
)

// Every Kafka client of every subcommand is built here, from the
// configuration's kafkaconn.Security, so that --kafka-tls* and
// --kafka-sasl-* apply to all of them (a client built by hand talks
// PLAINTEXT and fails against a SASL_SSL listener). The publisher and the
// dlq writer take the Security themselves; kafkaclients_test.go keeps
// hand-built clients out of this package.

// kafkaClient returns a kafka.Client over the configured brokers and
// security, and the function that closes its idle connections.
func (c *config) kafkaClient(clientID string, timeout time.Duration) (*kafka.Client, func()) {
	tr := c.kafkaSecurity.Transport(clientID, timeout, time.Minute)
	return &kafka.Client{Addr: kafka.TCP(c.brokers...), Timeout: timeout, Transport: tr}, tr.CloseIdleConnections
}

// kafkaReader returns a kafka.Reader of rc over the configured brokers,
// secured like every other client (rc's Brokers and Dialer are set here).
func (c *config) kafkaReader(clientID string, rc kafka.ReaderConfig) *kafka.Reader {
	rc.Brokers = c.brokers
	rc.Dialer = c.kafkaSecurity.Dialer(clientID, 10*time.Second)
	return kafka.NewReader(rc)
}
