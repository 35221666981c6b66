package record

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/jsontext"
)

// CloudEvents attribute values and header names of FormatCloudEvents
// records (the Kafka protocol binding: binary mode puts each attribute in
// a ce_<name> header and the data content type in content-type).
const (
	// CloudEventsSpecVersion is the specversion attribute.
	CloudEventsSpecVersion = "1.0"
	// CloudEventsJSONContentType is the datacontenttype of JSON payloads
	// (jsonb and json columns always are JSON, unless their bytes are not
	// UTF-8; others when they parse).
	CloudEventsJSONContentType = "application/json"
	// CloudEventsBinaryContentType is the datacontenttype of payloads
	// that are not JSON text (a bytea payload such as Avro or Protobuf,
	// or text that is not valid UTF-8).
	CloudEventsBinaryContentType = "application/octet-stream"
	// CloudEventsStructuredContentType is the content-type header of
	// structured mode records: the JSON event format.
	CloudEventsStructuredContentType = "application/cloudevents+json; charset=UTF-8"
	// HeaderContentType is the binding's content-type header.
	HeaderContentType = "content-type"
	// CloudEventsAggregateType is the extension attribute carrying the
	// aggregate_type column (CloudEvents has no attribute of its own for
	// it).
	CloudEventsAggregateType = "aggregatetype"
	// CloudEventsAggregateVersion is the extension attribute carrying the
	// aggregate_version column.
	CloudEventsAggregateVersion = "aggregateversion"
	// CloudEventsSchemaVersion is the extension attribute carrying the
	// schema_version column.
	CloudEventsSchemaVersion = "schemaversion"
)

// cloudEventsHeaders is the most headers a binary mode record starts with.
const cloudEventsHeaders = 10

// buildCloudEvents maps an event to a CloudEvent in the Kafka protocol
// binding: id = event_id, source, type = event_type, subject =
// aggregate_id, time = commit time (RFC 3339), datacontenttype (JSON or
// octet-stream), the extensions aggregatetype, aggregateversion and
// schemaversion, data = payload. The key is aggregate_id and the record
// time the commit time, as in every format; the row's headers follow as
// plain Kafka headers. A tombstone is the binary mode event without data
// (no content-type, a null value), in both modes: a structured event
// always has a value, and compaction needs a null one. ev.EventType is not
// empty (Encode refuses such a row first).
func buildCloudEvents(topic string, ev *Row, source string, mode CloudEventsMode, tombstone bool) (kafka.Message, error) {
	contentType := CloudEventsBinaryContentType
	if isJSONText(ev.Payload) {
		contentType = CloudEventsJSONContentType
	}
	var stamp [40]byte
	ts := ev.CommitTime.UTC().AppendFormat(stamp[:0], time.RFC3339Nano)
	msg := kafka.Message{Topic: topic, Key: bytesOf(ev.AggregateID), Time: ev.CommitTime}
	var h []kafka.Header
	if mode == CloudEventsStructured && !tombstone {
		h = make([]kafka.Header, 1, 2)
		h[0] = kafka.Header{Key: HeaderContentType, Value: []byte(CloudEventsStructuredContentType)}
		msg.Value = structuredEvent(ev, source, string(ts), contentType)
	} else {
		h = make([]kafka.Header, 0, cloudEventsHeaders+1)
		h = append(h,
			kafka.Header{Key: "ce_specversion", Value: []byte(CloudEventsSpecVersion)},
			kafka.Header{Key: "ce_id", Value: bytesOf(ev.EventID)},
			kafka.Header{Key: "ce_source", Value: bytesOf(source)},
			kafka.Header{Key: "ce_type", Value: bytesOf(ev.EventType)},
			kafka.Header{Key: "ce_subject", Value: bytesOf(ev.AggregateID)},
			kafka.Header{Key: "ce_time", Value: ts},
		)
		if !tombstone {
			h = append(h, kafka.Header{Key: HeaderContentType, Value: []byte(contentType)})
		}
		h = append(h,
			kafka.Header{Key: "ce_" + CloudEventsAggregateType, Value: bytesOf(ev.AggregateType)},
			kafka.Header{Key: "ce_" + CloudEventsAggregateVersion, Value: bytesOf(ev.AggregateVersion)},
			kafka.Header{Key: "ce_" + CloudEventsSchemaVersion, Value: bytesOf(ev.SchemaVersion)},
		)
		if !tombstone {
			msg.Value = ev.Payload
		}
	}
	if len(ev.Headers) > 0 {
		own := len(h)
		var err error
		if h, err = appendHeaders(h, ev.Headers); err == nil {
			err = checkRowHeaders(h, own, cloudEventsReserved)
		}
		if err != nil {
			return kafka.Message{}, fmt.Errorf("headers: %w", err)
		}
	}
	msg.Headers = h
	return msg, nil
}

// isJSONText reports whether a payload is JSON text: valid JSON, and
// valid UTF-8 (RFC 8259 section 8.1; encoding/json's Valid does not check
// the bytes inside strings). Any other payload is opaque bytes to a
// CloudEvent (application/octet-stream): carried unchanged in binary mode,
// as data_base64 in structured mode, never altered. A jsonb payload of a
// SQL_ASCII database may hold bytes that are not UTF-8.
func isJSONText(payload []byte) bool {
	return utf8.Valid(payload) && json.Valid(payload)
}

// cloudEventsReserved reports the header names the binding reads as the
// attributes set here (it lower-cases header names): a row header may add
// other ce_ extension attributes, not replace these.
func cloudEventsReserved(name string) bool {
	n := strings.ToLower(name)
	if n == HeaderContentType {
		return true
	}
	a, ok := strings.CutPrefix(n, "ce_")
	if !ok {
		return false
	}
	switch a {
	case "specversion", "id", "source", "type", "subject", "time", "datacontenttype", "dataschema", "data", "data_base64",
		CloudEventsAggregateType, CloudEventsAggregateVersion, CloudEventsSchemaVersion:
		return true
	}
	return false
}

// structuredEvent renders the event in the JSON event format: data is the
// payload itself when it is JSON, else data_base64.
func structuredEvent(ev *Row, source, ts, contentType string) []byte {
	n := 256 + len(ev.EventID) + len(source) + len(ev.EventType) + len(ev.AggregateID) + len(ev.AggregateType) +
		len(ev.AggregateVersion) + len(ev.SchemaVersion)
	if contentType == CloudEventsJSONContentType {
		n += len(ev.Payload)
	} else {
		n += base64.StdEncoding.EncodedLen(len(ev.Payload))
	}
	b := make([]byte, 0, n)
	member := func(name, value string) {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = jsontext.AppendString(b, value)
	}
	b = append(b, `{"specversion":"`+CloudEventsSpecVersion+`"`...)
	member("id", ev.EventID)
	member("source", source)
	member("type", ev.EventType)
	member("subject", ev.AggregateID)
	member("time", ts)
	member("datacontenttype", contentType)
	member(CloudEventsAggregateType, ev.AggregateType)
	member(CloudEventsAggregateVersion, ev.AggregateVersion)
	member(CloudEventsSchemaVersion, ev.SchemaVersion)
	if contentType == CloudEventsJSONContentType {
		b = append(b, `,"data":`...)
		b = append(b, ev.Payload...)
	} else {
		b = append(b, `,"data_base64":"`...)
		b = base64.StdEncoding.AppendEncode(b, ev.Payload)
		b = append(b, '"')
	}
	return append(b, '}')
}
