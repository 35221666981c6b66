package record

import (
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// Reasons an event cannot become a record (EncodeError.Code). They are
// also the reasons of the relay's dead letters and the reason label of
// outbox_relay_publish_errors_total.
const (
	// CodeInvalidRow is an outbox row with a NULL in a required column
	// (Row.Invalid; a NULL payload only without
	// Config.TombstoneOnNullPayload), without an event_type in
	// FormatCloudEvents, or with a column the record carries as text that
	// is not valid UTF-8 (an *InvalidUTF8Error: any text column, and the
	// payload of an expanded FormatDebezium value).
	CodeInvalidRow = "invalid_row"
	// CodeEmptyAggregateID is an empty aggregate_id: the record key.
	CodeEmptyAggregateID = "empty_aggregate_id"
	// CodeInvalidTopic is a topic name Kafka refuses (ValidTopic).
	CodeInvalidTopic = "invalid_topic"
	// CodeInvalidHeaders is a headers column that is not a JSON object of
	// strings, that repeats a header the format sets itself, or whose
	// names or values are not valid UTF-8 (an *InvalidUTF8Error) or hold a
	// lone UTF-16 surrogate escape.
	CodeInvalidHeaders = "invalid_headers"
)

// EncodeError is an event that cannot become a record in the configured
// format. Encoding it again cannot succeed: the relay dead-letters it.
type EncodeError struct {
	// EventID and AggregateID name the event.
	EventID     string
	AggregateID string
	// Code is the kind of fault: CodeInvalidRow, CodeEmptyAggregateID,
	// CodeInvalidTopic or CodeInvalidHeaders.
	Code string
	// Reason says what is wrong with the event. It never carries the
	// payload, nor the content of a field that is not valid UTF-8.
	Reason string
	// Err is the fault as a typed error when there is one (an
	// *InvalidUTF8Error), for errors.As; nil otherwise.
	Err error
}

// Error is the Code, then the Reason (the relay's dead-letter reason).
func (e *EncodeError) Error() string { return e.Code + ": " + e.Reason }

// Unwrap returns Err.
func (e *EncodeError) Unwrap() error { return e.Err }

// Encoder maps outbox events to Kafka records with a validated Config. It
// keeps no state between events: one Encoder may be used by any number of
// goroutines.
type Encoder struct {
	cfg Config
}

// NewEncoder returns the encoder of c, or c's validation error
// (Config.Validate).
func NewEncoder(c Config) (*Encoder, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Encoder{cfg: c}, nil
}

// Encode returns the record of ev with this configuration, as NewEncoder
// and Encoder.Encode do: an error is an invalid configuration or an
// *EncodeError.
func (c Config) Encode(topic string, ev *Row) (kafka.Message, error) {
	e, err := NewEncoder(c)
	if err != nil {
		return kafka.Message{}, err
	}
	return e.Encode(topic, ev)
}

// Encode returns the record of ev on topic: key = aggregate_id, time =
// the commit time, the value and headers of the configured format
// (docs/formats.md). The partition is left to the writer (the relay's is
// murmur2 of the key). An event that cannot become a record is an
// *EncodeError. Whatever the record carries as text (the key, header
// names and values, JSON strings) must be valid UTF-8, or the event is
// such an error (an *InvalidUTF8Error naming the field); a payload the
// format carries as bytes passes unchanged, whatever its bytes
// (docs/formats.md#invalid-utf-8). The record's key and header values
// alias ev's strings, and its value ev.Payload unless the format rewrites
// it: ev must not change while the record is in use.
func (e *Encoder) Encode(topic string, ev *Row) (kafka.Message, error) {
	if e.cfg.Format.Registry() {
		return kafka.Message{}, fmt.Errorf("record format %s encodes with a registered schema: use EncodeRegistered", e.cfg.Format)
	}
	return e.encode(topic, ev)
}

// encode is Encode's work, and the record EncodeRegistered encodes the
// value of.
func (e *Encoder) encode(topic string, ev *Row) (kafka.Message, error) {
	fail := func(code, reason string) (kafka.Message, error) {
		return kafka.Message{}, &EncodeError{EventID: ev.EventID, AggregateID: ev.AggregateID, Code: code, Reason: reason}
	}
	failUTF8 := func(code string, err *InvalidUTF8Error) (kafka.Message, error) {
		// The reason is the field and the offset alone: not the event's
		// ids either, which may be the field.
		return kafka.Message{}, &EncodeError{EventID: ev.EventID, AggregateID: ev.AggregateID, Code: code, Reason: err.Error(), Err: err}
	}
	// A NULL payload is an invalid row, or with TombstoneOnNullPayload
	// (when it is the row's only fault) a tombstone.
	tombstone := false
	if ev.Invalid != "" {
		if !e.cfg.TombstoneOnNullPayload || ev.Invalid != InvalidNullPayload {
			return fail(CodeInvalidRow, ev.Invalid)
		}
		tombstone = true
	}
	if ev.AggregateID == "" {
		return fail(CodeEmptyAggregateID, "aggregate_id is empty")
	}
	// Before the topic: one rendered from a column that is not UTF-8 is
	// refused as that column, not as a topic that quotes its bytes.
	if err := checkUTF8(ev); err != nil {
		return failUTF8(CodeInvalidRow, err)
	}
	if err := ValidTopic(topic); err != nil {
		return fail(CodeInvalidTopic, err.Error())
	}
	if e.cfg.Format == FormatCloudEvents && ev.EventType == "" {
		return fail(CodeInvalidRow, "event_type is empty: a CloudEvent needs a type")
	}
	if e.cfg.Format == FormatDebezium && e.cfg.DebeziumExpandJSON && !tombstone {
		// The expanded value is JSON text the relay writes: a payload
		// that is not UTF-8 has no such form (the JsonConverter's
		// base64 string is for bytea, which the relay cannot tell).
		if i := invalidUTF8AtBytes(ev.Payload); i >= 0 {
			return failUTF8(CodeInvalidRow, &InvalidUTF8Error{Field: "payload", Offset: i})
		}
	}
	msg, err := e.cfg.build(topic, ev, tombstone)
	if err != nil {
		// The reason names the event again, as the relay's dead letters
		// always did (its ids are valid UTF-8 by now).
		ee := &EncodeError{EventID: ev.EventID, AggregateID: ev.AggregateID, Code: CodeInvalidHeaders,
			Reason: fmt.Sprintf("event %s (aggregate %s): %v", ev.EventID, ev.AggregateID, err)}
		var u *InvalidUTF8Error
		if errors.As(err, &u) {
			ee.Err = u
		}
		return kafka.Message{}, ee
	}
	if tombstone {
		msg.Value = nil
	}
	return msg, nil
}

// build maps ev to its record in the configured format. tombstone says
// that ev's payload is NULL and the record carries a null value.
func (c *Config) build(topic string, ev *Row, tombstone bool) (kafka.Message, error) {
	switch c.Format {
	case "", FormatNative, FormatAvro, FormatProtobuf, FormatJSONSchema:
		// The registry formats' record is the native one; EncodeRegistered
		// then encodes its value.
		return buildMessage(topic, ev)
	case FormatDebezium:
		return buildDebezium(topic, ev, c.DebeziumExpandJSON && !tombstone)
	case FormatCloudEvents:
		return buildCloudEvents(topic, ev, c.CloudEventsSource, c.CloudEventsMode, tombstone)
	}
	return kafka.Message{}, fmt.Errorf("record format %q: use native, debezium or cloudevents", c.Format)
}

// checkRowHeaders refuses row headers that would repeat a header the
// format sets itself (reserved reports those names): a consumer that
// takes the last occurrence of a header would read the row's value
// instead of the event's.
func checkRowHeaders(h []kafka.Header, from int, reserved func(string) bool) error {
	for _, x := range h[from:] {
		if reserved(x.Key) {
			return fmt.Errorf("row header %q would repeat a header of the record format", x.Key)
		}
	}
	return nil
}

// ValidTopic applies Kafka's topic name rules.
func ValidTopic(topic string) error {
	if topic == "" || topic == "." || topic == ".." {
		return fmt.Errorf("invalid Kafka topic name %q", topic)
	}
	if len(topic) > 249 {
		return fmt.Errorf("invalid Kafka topic name %q: longer than 249 characters", topic)
	}
	for _, c := range topic {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("invalid Kafka topic name %q: only letters, digits, '.', '_' and '-' are allowed", topic)
		}
	}
	return nil
}
