package record

import (
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record/internal/jsonexpand"
)

// HeaderDebeziumID is the event id header of FormatDebezium records: the
// Outbox Event Router always names it "id", whatever table.field.event.id
// says. The other headers are the outbox columns the router places as
// headers with table.fields.additional.placement (docs/formats.md), named
// after their columns like the native format's (HeaderEventType, ...).
const HeaderDebeziumID = "id"

// debeziumHeaders is the number of headers a FormatDebezium record starts
// with, before the row's own.
const debeziumHeaders = 5

// buildDebezium maps an event to the record Debezium's Outbox Event Router
// emits for it with the configuration in docs/formats.md: key =
// aggregate_id, value = payload (expanded with expand, as
// table.expand.json.payload=true does), time = commit time, headers id,
// event_type, aggregate_type, aggregate_version, schema_version (the
// router's header values are the columns' text, as Connect's
// SimpleHeaderConverter writes them), then the row's headers.
func buildDebezium(topic string, ev *Row, expand bool) (kafka.Message, error) {
	h := make([]kafka.Header, debeziumHeaders, debeziumHeaders+1)
	h[0] = kafka.Header{Key: HeaderDebeziumID, Value: bytesOf(ev.EventID)}
	h[1] = kafka.Header{Key: HeaderEventType, Value: bytesOf(ev.EventType)}
	h[2] = kafka.Header{Key: HeaderAggregateType, Value: bytesOf(ev.AggregateType)}
	h[3] = kafka.Header{Key: HeaderAggregateVersion, Value: bytesOf(ev.AggregateVersion)}
	h[4] = kafka.Header{Key: HeaderSchemaVersion, Value: bytesOf(ev.SchemaVersion)}
	if len(ev.Headers) > 0 {
		var err error
		if h, err = appendHeaders(h, ev.Headers); err == nil {
			err = checkRowHeaders(h, debeziumHeaders, debeziumReserved)
		}
		if err != nil {
			return kafka.Message{}, fmt.Errorf("headers: %w", err)
		}
	}
	value := ev.Payload
	if expand && value != nil {
		value = jsonexpand.Payload(value)
	}
	return kafka.Message{
		Topic:   topic,
		Key:     bytesOf(ev.AggregateID),
		Value:   value,
		Headers: h,
		Time:    ev.CommitTime,
	}, nil
}

// debeziumReserved reports the header names a FormatDebezium record sets.
func debeziumReserved(name string) bool {
	switch name {
	case HeaderDebeziumID, HeaderEventType, HeaderAggregateType, HeaderAggregateVersion, HeaderSchemaVersion:
		return true
	}
	return false
}
