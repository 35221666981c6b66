package publisher

import (
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/kafkaconn"
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
// risks a duplicate, giving up risks a loss.
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
		switch kerr {
		case kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidTopic,
			kafka.InvalidRecord, kafka.TopicAuthorizationFailed, kafka.UnsupportedForMessageFormat:
			return Permanent, kerr.Title()
		case kafka.ClusterAuthorizationFailed, kafka.SASLAuthenticationFailed, kafka.UnsupportedSASLMechanism,
			kafka.IllegalSASLState, kafka.InvalidRequiredAcks, kafka.TransactionalIDAuthorizationFailed:
			return Fatal, kerr.Title()
		}
		// Temporary errors are retried; so are the rest, since giving up
		// on an error nobody classified would risk a loss.
		return Transient, kerr.Title()
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
