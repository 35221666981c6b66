package publisher

import (
	"fmt"

	"github.com/segmentio/kafka-go"
)

// EventError is an event the publisher cannot publish: one that cannot
// become a Kafka record (a record.EncodeError: invalid row, empty
// aggregate_id, invalid topic, bad headers; its Reason is the
// EncodeError's) or whose record is too large for a batch. Retrying
// cannot fix it: the relay dead-letters it, or stops without dead
// letters.
type EventError struct {
	EventID     string
	AggregateID string
	Reason      string
}

// Error names the event and says why it cannot be published.
func (e *EventError) Error() string {
	return fmt.Sprintf("event %s (aggregate %s): %s", e.EventID, e.AggregateID, e.Reason)
}

// messageSize bounds kafka-go's own accounting of a message's size in a
// batch (Message.totalSize), so that a lane batch never exceeds the
// Writer's BatchBytes and is never split into two produce requests.
func messageSize(m *kafka.Message) int {
	n := 64 + len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += 10 + len(h.Key) + len(h.Value)
	}
	return n
}
