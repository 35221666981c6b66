package relay

import (
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
)

// The methods below build kafka-go clients from the one Kafka
// configuration, so that tools beside the relay (a replay, a
// reconciliation, an operator's consumer) reach the brokers exactly as it
// does: a client built by hand talks PLAINTEXT and fails against a
// SASL_SSL listener.

// security is k's TLS and SASL for package kafkaconn.
func (k KafkaConfig) security() kafkaconn.Security {
	return kafkaconn.Security{TLS: k.TLS, SASL: k.SASL, SessionLifetime: k.SessionLifetime}
}

// Transport returns a kafka.Transport (for kafka.Client, kafka.Writer and
// publisher.Config) with k's TLS, SASL and MetadataTTL, a 5 s dial timeout
// and clientID as the client ID brokers log and quota by. With SASL it
// recycles its connections before their sessions end (SessionLifetime).
func (k KafkaConfig) Transport(clientID string) *kafka.Transport {
	return k.security().Transport(clientID, 5*time.Second, k.MetadataTTL)
}

// transportLogged is Transport, logging each recycle of its connections
// before a SASL session ends.
func (k KafkaConfig) transportLogged(clientID string, log *slog.Logger) *kafka.Transport {
	return k.security().TransportNotify(clientID, 5*time.Second, k.MetadataTTL, func(end time.Time) {
		log.Info("closing Kafka connections before their SASL session ends; the next requests connect and authenticate anew",
			slog.String("stage", "kafka"), slog.Time("session_end", end))
	})
}

// Dialer returns a kafka.Dialer (for kafka.Conn and kafka.Reader) with k's
// TLS and SASL and a 10 s timeout.
func (k KafkaConfig) Dialer(clientID string) *kafka.Dialer {
	return k.security().Dialer(clientID, 10*time.Second)
}

// Client returns a kafka.Client over k's brokers whose requests and dials
// time out after timeout, and the function that closes its idle
// connections.
func (k KafkaConfig) Client(clientID string, timeout time.Duration) (*kafka.Client, func()) {
	tr := k.security().Transport(clientID, timeout, k.MetadataTTL)
	return &kafka.Client{Addr: kafka.TCP(k.Brokers...), Timeout: timeout, Transport: tr}, tr.CloseIdleConnections
}

// Reader returns a kafka.Reader of rc over k's brokers, with k's Dialer
// (rc's Brokers and Dialer are replaced).
func (k KafkaConfig) Reader(clientID string, rc kafka.ReaderConfig) *kafka.Reader {
	rc.Brokers = k.Brokers
	rc.Dialer = k.Dialer(clientID)
	return kafka.NewReader(rc)
}
