package hint

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/poison"
)

func TestWith(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("kafka a:1: %w", kafka.SASLAuthenticationFailed), "check Kafka.SASL.Username"},
		{errors.New("kafka.(*Client).Metadata: tls: failed to verify certificate: x509: certificate signed by unknown authority"), "set Kafka.TLS.RootCAs"},
		{errors.New("kafka.(*Client).Metadata: remote error: tls: bad certificate"), "set Kafka.TLS.Certificates"},
		{errors.New("kafka.(*Client).Metadata: unexpected EOF: broker appears to be expecting TLS"), "set Kafka.TLS (and Kafka.TLS.RootCAs"},
		{fmt.Errorf("connect: %w", &pgconn.PgError{Code: "28P01", Message: "password authentication failed for user \"x\""}), "correct it in Database.URL"},
		{fmt.Errorf("connect: %w", &pgconn.PgError{Code: "28000", Message: "no pg_hba.conf entry for host \"127.0.0.1\", user \"x\", database \"d\", no encryption"}), "sslmode=verify-full"},
		{fmt.Errorf("x: %w", &pgconn.PgError{Code: "42501", Message: "must be superuser or replication role to start walsender"}), "outbox-relay migrate --grant-role ROLE"},
	}
	for _, c := range cases {
		got := With(c.err)
		if !strings.Contains(got.Error(), "; fix: ") || !strings.Contains(got.Error(), c.want) {
			t.Errorf("With(%v) = %v, want a fix naming %q", c.err, got, c.want)
		}
		if !poison.IsPermanent(got) || !errors.Is(got, c.err) {
			t.Errorf("With(%v) = %v: want it marked permanent, wrapping the error", c.err, got)
		}
		if again := With(got); again != got {
			t.Errorf("With added a second hint: %v", again)
		}
	}
	if poison.IsPermanent(With(errors.New("dial tcp: connection refused"))) || With(errors.New("x")).Error() != "x" || With(nil) != nil {
		t.Error("ordinary errors got a hint")
	}
	if kafkaconn.Classify(errors.New("dial tcp: connection refused")) != kafkaconn.FailureNone {
		t.Error("network error classified as security failure")
	}
}
