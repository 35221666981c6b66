package publisher

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/segmentio/kafka-go"
	produceapi "github.com/segmentio/kafka-go/protocol/produce"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce/producetest"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

// TestClassifyKafkaCodes pins the class of every Kafka code docs/errors.md
// names, as the sink returns them (bare, or wrapped with the broker's
// message).
func TestClassifyKafkaCodes(t *testing.T) {
	cases := []struct {
		code  kafka.Error
		class Class
	}{
		// Permanent: this event can never be accepted by its topic.
		{kafka.MessageSizeTooLarge, Permanent},
		{kafka.RecordListTooLarge, Permanent},
		{kafka.InvalidTopic, Permanent},
		{kafka.InvalidRecord, Permanent},
		{kafka.TopicAuthorizationFailed, Permanent},
		{kafka.UnsupportedForMessageFormat, Permanent},
		// Fatal: the relay's configuration or the cluster's settings.
		{kafka.InvalidTimestamp, Fatal},
		{kafka.InvalidRequiredAcks, Fatal},
		{kafka.ClusterAuthorizationFailed, Fatal},
		{kafka.TransactionalIDAuthorizationFailed, Fatal},
		{kafka.SASLAuthenticationFailed, Fatal},
		{kafka.UnsupportedSASLMechanism, Fatal},
		{kafka.IllegalSASLState, Fatal},
		{kafka.SecurityDisabled, Fatal},
		{kafka.BrokerAuthorizationFailed, Transient}, // Kafka's 55: OPERATION_NOT_ATTEMPTED
		{kafka.UnsupportedVersion, Fatal},
		{kafka.InvalidRequest, Fatal},
		{kafka.UnsupportedCompressionType, Fatal},
		{kafka.InvalidProducerEpoch, Fatal},
		{kafka.InvalidProducerIDMapping, Fatal},
		{kafka.ProducerFenced, Fatal},
		{kafka.InvalidTransactionState, Fatal},
		{kafka.TransactionCoordinatorFenced, Fatal},
		{kafka.OutOfOrderSequenceNumber, Fatal},
		{kafka.DuplicateSequenceNumber, Fatal},
		{kafka.UnknownProducerId, Fatal},
		{kafka.TransactionalIDNotFound, Fatal},
		{kafka.PolicyViolation, Fatal},
		{kafka.InvalidPartitionNumber, Fatal},
		{kafka.InvalidConfiguration, Fatal},
		{kafka.InvalidReplicaAssignment, Fatal},
		// Transient: heals by itself (or is unknown).
		{kafka.UnknownTopicOrPartition, Transient},
		{kafka.UnknownTopicID, Transient},
		{kafka.NotEnoughReplicas, Transient},
		{kafka.NotEnoughReplicasAfterAppend, Transient},
		{kafka.InvalidMessage, Transient},
		{kafka.NotLeaderForPartition, Transient},
		{kafka.LeaderNotAvailable, Transient},
		{kafka.RequestTimedOut, Transient},
		{kafka.BrokerNotAvailable, Transient},
		{kafka.NetworkException, Transient},
		{kafka.KafkaStorageError, Transient},
		{kafka.ThrottlingQuotaExceeded, Transient},
		{kafka.FencedLeaderEpoch, Transient},
		{kafka.InvalidReplicationFactor, Transient},
		{kafka.Unknown, Transient},
		{kafka.Error(9999), Transient},
	}
	for _, c := range cases {
		for _, err := range []error{c.code, fmt.Errorf("%w: broker says why", c.code), kafka.WriteErrors{nil, c.code}} {
			got, reason := classify(err)
			sasl := c.code == kafka.SASLAuthenticationFailed || c.code == kafka.UnsupportedSASLMechanism || c.code == kafka.IllegalSASLState
			if got != c.class || reason != codeReason(c.code) && !sasl { // SASL codes carry kafkaconn's reasons
				t.Errorf("%d %v: %s (%q), want %s (%q)", int(c.code), err, got, reason, c.class, codeReason(c.code))
			}
		}
	}
}

// TestFatalErrorSaysTheFix: every fatal Kafka code stops the relay with an
// error that names where it happened and what to change.
func TestFatalErrorSaysTheFix(t *testing.T) {
	for code := kafka.Error(-1); code < 120; code++ {
		if classifyCode(code) != Fatal || code == kafka.SASLAuthenticationFailed || code == kafka.UnsupportedSASLMechanism ||
			code == kafka.IllegalSASLState {
			continue // the SASL ones get their fix from kafkaconn's hints
		}
		msg := fatalError("t", 2, codeReason(code), fmt.Errorf("%w: x", code)).Error()
		if !strings.HasPrefix(msg, "publish to t[2]: ") || !strings.Contains(msg, "; fix: ") {
			t.Errorf("%d: %q lacks where or fix", int(code), msg)
		}
	}
	msg := fatalError("t", 0, "invalid_timestamp", kafka.InvalidTimestamp).Error()
	if !strings.Contains(msg, "message.timestamp.before.max.ms") {
		t.Errorf("INVALID_TIMESTAMP fix does not name the topic setting: %q", msg)
	}
	msg = fatalError("t", 5, "unknown_topic_or_partition", kafka.UnknownTopicOrPartition).Error()
	if !strings.Contains(msg, "no longer exists") {
		t.Errorf("vanished partition: %q", msg)
	}
	if msg := fatalError("t", -1, "policy_violation", kafka.PolicyViolation).Error(); !strings.HasPrefix(msg, "topic t: ") {
		t.Errorf("topic lookup: %q", msg)
	}
}

// TestReasonsAreSnakeCase: every reason classify can produce, for every
// Kafka code kafka-go knows (and codes it does not), and for the other
// failures, is a snake_case label value: the reason label of
// outbox_relay_publish_errors_total never mixes "Leader Not Available"
// with message_too_large.
func TestReasonsAreSnakeCase(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z0-9_]+$`)
	var errs []error
	for code := kafka.Error(-1); code <= 200; code++ {
		errs = append(errs, code, fmt.Errorf("%w: broker says why", code), kafka.WriteErrors{nil, code})
	}
	errs = append(errs, kafka.Error(9999), kafka.MessageTooLargeError{}, context.DeadlineExceeded,
		&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, syscall.ECONNRESET, errors.New("something else"),
		x509.UnknownAuthorityError{}, x509.HostnameError{Certificate: &x509.Certificate{}, Host: "h"})
	seen := map[string]bool{}
	for _, err := range errs {
		_, reason := classify(err)
		if !snake.MatchString(reason) {
			t.Errorf("%v: reason %q is not snake_case", err, reason)
		}
		seen[reason] = true
	}
	for _, want := range []string{"leader_not_available", "unknown_topic_or_partition", "message_size_too_large",
		"not_enough_replicas", "message_too_large", "timeout", "network", "other", "kafka_error_9999"} {
		if !seen[want] {
			t.Errorf("no error produced reason %s", want)
		}
	}
	for in, want := range map[string]string{"Leader Not Available": "leader_not_available", " Non-Empty  Group ": "non_empty_group",
		"SASL Authentication Failed": "sasl_authentication_failed", "": ""} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLingering(t *testing.T) {
	for _, err := range []error{kafka.UnknownTopicOrPartition, fmt.Errorf("topic x: %w", kafka.UnknownTopicOrPartition), kafka.UnknownTopicID} {
		if !lingering(err) {
			t.Errorf("%v not lingering", err)
		}
	}
	for _, err := range []error{kafka.NotLeaderForPartition, context.DeadlineExceeded, errors.New("x")} {
		if lingering(err) {
			t.Errorf("%v lingering", err)
		}
	}
}

// LastFailure keeps the most recent Failure a publisher reported, for
// tests that check the failure hook.
type LastFailure struct {
	mu sync.Mutex
	f  *Failure
}

func (l *LastFailure) Record(f Failure) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f = &f
}

func (l *LastFailure) Load() *Failure {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f
}

// laneOver returns a lane of topic "t" partition 0 writing to f, with a
// LastFailure recording its failures.
func laneOver(t *testing.T, f *producetest.Broker, unknownTopicTimeout time.Duration) (*lane, *LastFailure) {
	t.Helper()
	lf := &LastFailure{}
	cfg := testConfig(config{Config: Config{BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, UnknownTopicTimeout: unknownTopicTimeout}, failed: lf.Record})
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{cfg: cfg, log: slog.New(slog.DiscardHandler), m: metrics.New().Publisher(), ctx: ctx, cancel: cancel, fatal: make(chan error, 1)}
	p.sink = kafkaproduce.NewSink(ctx, f, kafka.TCP("127.0.0.1:1"), 5*time.Second, 0, func() int { return 1 })
	p.sink.Start()
	t.Cleanup(func() { cancel(); p.sink.Stop() })
	return &lane{p: p, topic: "t", partition: 0}, lf
}

func testRecord() *outgoing {
	ev := &replication.WALEvent{Row: record.Row{EventID: "e1", AggregateID: "a1", EventType: "created"}}
	return &outgoing{ev: ev, msg: kafka.Message{Topic: "t", Key: []byte("a1"), Value: []byte("{}")}, size: 10}
}

// TestVanishedPartitionStops: UNKNOWN_TOPIC_OR_PARTITION that lasts past
// --unknown-topic-timeout stops the relay (position held) with the fix,
// instead of retrying forever; the lane's failures are recorded as the
// stall detector's cause.
func TestVanishedPartitionStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &producetest.Broker{Reply: func(string, int32) *produceapi.ResponsePartition {
			return &produceapi.ResponsePartition{ErrorCode: int16(kafka.UnknownTopicOrPartition)}
		}}
		l, lf := laneOver(t, f, 100*time.Millisecond)
		res := make(chan sendResult, 1)
		go func() { res <- l.send([]*outgoing{testRecord()}) }()
		select {
		case err := <-l.p.fatal:
			if !strings.Contains(err.Error(), "publish to t[0]") || !strings.Contains(err.Error(), "no longer exists") {
				t.Errorf("fatal error %q", err)
			}
		case <-time.After(5 * time.Second): // virtual time, like the lane's backoff and timeout
			t.Fatal("a vanished partition was retried for 5s, past Publish.UnknownTopicTimeout 100ms")
		}
		if r := <-res; r != closing {
			t.Fatalf("send returned %v, want closing", r)
		}
		if fl := lf.Load(); fl == nil || fl.Class != Fatal || fl.Topic != "t" || fl.EventID != "e1" || fl.AggregateID != "a1" || fl.Attempt < 2 {
			t.Fatalf("last failure %+v", fl)
		}
	})
}

// TestUnknownPartitionHeals: a short UNKNOWN_TOPIC_OR_PARTITION (metadata
// lag after a topic is created) is retried, not fatal.
func TestUnknownPartitionHeals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		f := &producetest.Broker{Reply: func(string, int32) *produceapi.ResponsePartition {
			if calls.Add(1) <= 3 {
				return &produceapi.ResponsePartition{ErrorCode: int16(kafka.UnknownTopicOrPartition)}
			}
			return &produceapi.ResponsePartition{}
		}}
		l, lf := laneOver(t, f, time.Minute)
		if r := l.send([]*outgoing{testRecord()}); r != sent {
			t.Fatalf("send returned %v, want sent", r)
		}
		select {
		case err := <-l.p.fatal:
			t.Fatalf("fatal: %v", err)
		default:
		}
		if fl := lf.Load(); fl == nil || fl.Class != Transient || fl.Reason != "unknown_topic_or_partition" {
			t.Fatalf("last failure %+v", fl)
		}
	})
}
