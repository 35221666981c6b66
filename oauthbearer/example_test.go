package oauthbearer_test

import (
	"crypto/tls"
	"log"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/oauthbearer"
	"github.com/outbox-relay/outbox-relay/relay"
)

// The relay and an inbox authenticating to Confluent Cloud with tokens of
// an OAuth client (client-credentials grant) mapped to an identity pool.
func Example() {
	tokens := oauthbearer.Cached(&oauthbearer.ClientCredentials{
		TokenURL:     "https://idp.example.com/oauth2/token",
		ClientID:     "outbox-relay",
		ClientSecret: "from a secret store",
		Scope:        "kafka",
	}, 0)
	mech, err := oauthbearer.Mechanism(tokens, map[string]string{
		"logicalCluster": "lkc-abc123",
		"identityPoolId": "pool-XyZ9",
	})
	if err != nil {
		log.Fatal(err)
	}

	// The relay: its producer connections are recycled before each
	// token expires (and before SessionLifetime, the brokers'
	// connections.max.reauth.ms, if set).
	var cfg relay.Config
	cfg.Kafka = relay.KafkaConfig{
		Brokers:         []string{"pkc-xxxxx.eu-west-1.aws.confluent.cloud:9092"},
		TLS:             &tls.Config{MinVersion: tls.VersionTLS12},
		SASL:            mech,
		SessionLifetime: 0,
	}

	// An inbox: its kafka-go Dialer reconnects when the broker ends a
	// session.
	_ = inbox.Config{
		Brokers: cfg.Kafka.Brokers,
		TuneReader: func(rc *kafka.ReaderConfig) {
			rc.Dialer = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true,
				TLS: &tls.Config{MinVersion: tls.VersionTLS12}, SASLMechanism: mech}
		},
	}
}
