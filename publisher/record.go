package publisher

import (
	"fmt"

	"github.com/segmentio/kafka-go"
)

// EventError is an event that cannot become a Kafka record (bad headers,
// invalid topic, too large). Retrying cannot fix it.
type EventError struct {
	EventID     string
	AggregateID string
	Reason      string
}

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
