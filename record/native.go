package record

import (
	"fmt"

	"github.com/segmentio/kafka-go"
)

// buildMessage maps an event to a Kafka message: key = aggregate_id, value =
// payload, time = commit time, the standard headers then the row's headers.
func buildMessage(topic string, ev *Row) (kafka.Message, error) {
	h := make([]kafka.Header, 5, 6)
	h[0] = kafka.Header{Key: HeaderEventID, Value: bytesOf(ev.EventID)}
	h[1] = kafka.Header{Key: HeaderEventType, Value: bytesOf(ev.EventType)}
	h[2] = kafka.Header{Key: HeaderSchemaVersion, Value: bytesOf(ev.SchemaVersion)}
	h[3] = kafka.Header{Key: HeaderAggregateType, Value: bytesOf(ev.AggregateType)}
	h[4] = kafka.Header{Key: HeaderAggregateVersion, Value: bytesOf(ev.AggregateVersion)}
	if len(ev.Headers) > 0 {
		var err error
		if h, err = appendHeaders(h, ev.Headers); err != nil {
			return kafka.Message{}, fmt.Errorf("headers: %w", err)
		}
		if err = checkRowHeaders(h, 5, nativeReserved); err != nil {
			return kafka.Message{}, fmt.Errorf("headers: %w", err)
		}
	}
	return kafka.Message{
		Topic:   topic,
		Key:     bytesOf(ev.AggregateID),
		Value:   ev.Payload,
		Headers: h,
		Time:    ev.CommitTime,
	}, nil
}

// nativeReserved reports the headers FormatNative sets from the outbox
// columns: a row header of the same name would follow the event's own,
// and a consumer that reads the last one (Java's lastHeader) would take
// the row's forged event_id for the event's.
func nativeReserved(name string) bool {
	switch name {
	case HeaderEventID, HeaderEventType, HeaderSchemaVersion, HeaderAggregateType, HeaderAggregateVersion:
		return true
	}
	return false
}
