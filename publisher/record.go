package publisher

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/replication"
)

// Standard header names set on every record.
const (
	HeaderEventID          = "event_id"
	HeaderEventType        = "event_type"
	HeaderSchemaVersion    = "schema_version"
	HeaderAggregateType    = "aggregate_type"
	HeaderAggregateVersion = "aggregate_version"
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

// buildMessage maps an event to a Kafka message: key = aggregate_id, value =
// payload, time = commit time, the standard headers then the row's headers.
func buildMessage(topic string, ev *replication.Event) (kafka.Message, error) {
	n := 5
	var rowHeaders []kafka.Header
	if len(ev.Headers) > 0 {
		var err error
		rowHeaders, err = parseHeaders(ev.Headers)
		if err != nil {
			return kafka.Message{}, &EventError{EventID: ev.EventID, AggregateID: ev.AggregateID, Reason: "headers: " + err.Error()}
		}
		n += len(rowHeaders)
	}
	h := make([]kafka.Header, 0, n)
	h = append(h,
		kafka.Header{Key: HeaderEventID, Value: []byte(ev.EventID)},
		kafka.Header{Key: HeaderEventType, Value: []byte(ev.EventType)},
		kafka.Header{Key: HeaderSchemaVersion, Value: []byte(ev.SchemaVersion)},
		kafka.Header{Key: HeaderAggregateType, Value: []byte(ev.AggregateType)},
		kafka.Header{Key: HeaderAggregateVersion, Value: []byte(ev.AggregateVersion)},
	)
	h = append(h, rowHeaders...)
	return kafka.Message{
		Topic:   topic,
		Key:     []byte(ev.AggregateID),
		Value:   ev.Payload,
		Headers: h,
		Time:    ev.CommitTime,
	}, nil
}

// parseHeaders reads a JSON object of string values, keeping key order.
func parseHeaders(raw []byte) ([]kafka.Header, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var out []kafka.Header
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := kt.(string)
		vt, err := dec.Token()
		if err != nil {
			return nil, err
		}
		val, ok := vt.(string)
		if !ok {
			return nil, fmt.Errorf("value of %q is not a string", key)
		}
		if key == "" {
			return nil, errors.New("empty header name")
		}
		out = append(out, kafka.Header{Key: key, Value: []byte(val)})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errors.New("malformed JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return out, nil
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
