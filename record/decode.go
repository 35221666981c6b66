package record

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
)

// headerCESpecVersion is the specversion attribute of a binary mode
// CloudEvent: DetectFormat looks for it.
const headerCESpecVersion = "ce_specversion"

// Event is one outbox event as a consumer sees it: the relay's record
// decoded back into the outbox row's fields, plus where it was read from.
// The inbox hands it to its handlers.
type Event struct {
	// ID is the event_id column, a UUID (in its canonical lower-case
	// form).
	ID string
	// AggregateType is the aggregate_type column.
	AggregateType string
	// AggregateID is the aggregate_id column: the record key (a
	// CloudEvent's subject).
	AggregateID string
	// AggregateVersion is the aggregate_version column.
	AggregateVersion int64
	// EventType is the event_type column.
	EventType string
	// SchemaVersion is the schema_version column.
	SchemaVersion int
	// Payload is the record value (a CloudEvent's data); nil for a
	// tombstone (a row with a NULL payload, relayed with
	// --tombstone-on-null-payload).
	Payload []byte
	// Headers are the outbox row's own headers (the standard ones are
	// the fields above), and a CloudEvent's extension attributes other
	// than the relay's, as ce_<name>.
	Headers map[string]string

	// Topic, Partition and Offset say where the record was read from.
	Topic     string
	Partition int
	Offset    int64
	// Time is the record timestamp: the outbox transaction's commit time.
	Time time.Time
	// Format is the format the record was read in (never empty). A
	// registry format's headers are the native format's, so DetectFormat
	// reads such a record as FormatNative: SchemaID tells it apart.
	Format Format

	// SchemaID is the schema registry id of a value in the Confluent
	// wire format (the registry formats': magic byte 0, then the 4-byte
	// id), whatever the format the record was read in; 0 when the value
	// is not framed. Decode only reads it: Payload stays the framed
	// value, since decoding the body needs the registry (the inbox does
	// it, see inbox.SchemaConfig).
	SchemaID uint32
	// KeySchemaID is the schema registry id of a key in the Confluent
	// wire format (a relay's with --schema-key), 0 for a plain key.
	// AggregateID is then the string the framed key holds (DecodeKey).
	KeySchemaID uint32
	// Subject is the registry subject of the value's schema as the
	// producer's subject strategy names it (record.Config.SchemaRef):
	// Decode cannot know the strategy and leaves it empty; the inbox sets
	// it from its configuration when SchemaID is set.
	Subject string
}

// DecodeError is a record that is not an outbox event (a missing or
// malformed standard header). Redelivering it cannot fix it, so it is
// dead-lettered like a permanent handler failure.
type DecodeError struct {
	// Topic, Partition and Offset name the record.
	Topic     string
	Partition int
	Offset    int64
	// Reason says why the record is not an outbox event.
	Reason string
	// Err is the cause, when there is one to test with errors.Is
	// (ErrNotFramed; record.ErrSchemaNotFound or ErrSchemaInvalid from
	// the inbox's registry lookup); Reason already says it.
	Err error
}

// Unwrap returns Err.
func (e *DecodeError) Unwrap() error { return e.Err }

// Error names the record and says why it is not an outbox event.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("record %s/%d@%d is not an outbox event: %s", e.Topic, e.Partition, e.Offset, e.Reason)
}

// Decode maps a record written by outbox-relay, in any of its formats
// (detected from the headers: DetectFormat), back to an Event. The first
// occurrence of each standard header wins (the relay writes them first).
// A value in the Confluent wire format sets Event.SchemaID, in any format;
// Decode does no I/O, so the Payload is the framed value.
func Decode(m kafka.Message) (Event, error) {
	return DecodeFormat(m, "")
}

// DetectFormat reports the format of m from its headers: a content-type
// of application/cloudevents... (structured) or a ce_specversion header
// (binary) is a CloudEvent, an event_id header the native format, an id
// header without event_id the debezium format; a record with none of
// these is taken for native (and fails to decode). The registry formats
// (FormatAvro, FormatProtobuf, FormatJSONSchema) carry the native headers:
// their records are detected as FormatNative, with Event.SchemaID set by
// the framed value.
func DetectFormat(m kafka.Message) Format {
	debezium := false
	for _, h := range m.Headers {
		switch {
		case h.Key == HeaderEventID:
			return FormatNative
		case h.Key == HeaderDebeziumID:
			debezium = true
		case strings.EqualFold(h.Key, headerCESpecVersion):
			return FormatCloudEvents
		case strings.EqualFold(h.Key, HeaderContentType) && isStructuredCE(h.Value):
			return FormatCloudEvents
		}
	}
	if debezium {
		return FormatDebezium
	}
	return FormatNative
}

// isStructuredCE reports whether a content-type is a CloudEvents event
// format (application/cloudevents, matched case-insensitively).
func isStructuredCE(ct []byte) bool {
	const prefix = "application/cloudevents"
	return len(ct) >= len(prefix) && strings.EqualFold(string(ct[:len(prefix)]), prefix)
}

// DecodeFormat maps a record in format f back to an Event; the empty f
// detects the format (Decode). An error is a *DecodeError; the Event
// then holds what was read (the key, the value, where the record was
// read from, whatever fields were decoded). A registry format reads the
// native headers and requires a framed value (or none: a tombstone); any
// format sets Event.SchemaID when the value is framed.
func DecodeFormat(m kafka.Message, f Format) (Event, error) {
	if f == "" {
		f = DetectFormat(m)
	}
	ev := Event{
		AggregateID: string(m.Key),
		Payload:     m.Value,
		Topic:       m.Topic,
		Partition:   m.Partition,
		Offset:      m.Offset,
		Time:        m.Time,
		Format:      f,
	}
	var f5 fields
	// A framed key (a key schema) holds the aggregate_id; a CloudEvent's
	// subject, read below, still wins.
	agg, keyID, err := DecodeKey(m.Key, f)
	if err == nil {
		ev.AggregateID, ev.KeySchemaID = agg, keyID
	}
	switch {
	case err != nil:
	case f == FormatNative || f == FormatAvro || f == FormatProtobuf || f == FormatJSONSchema:
		f5, err = headerFields(&ev, m.Headers, HeaderEventID, "event_id header")
	case f == FormatDebezium:
		f5, err = headerFields(&ev, m.Headers, HeaderDebeziumID, "id header")
	case f == FormatCloudEvents:
		f5, err = cloudEventFields(&ev, m)
	default:
		err = fmt.Errorf("unknown record format %q", f)
	}
	if err == nil {
		err = f5.apply(&ev)
	}
	if err == nil {
		err = schemaID(&ev, f)
	}
	if err != nil {
		return ev, &DecodeError{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Reason: err.Error(), Err: errors.Unwrap(err)}
	}
	return ev, nil
}

// schemaID sets ev.SchemaID from a framed payload. A registry format's
// value must be framed (a tombstone has none); in another format an
// unframed value is just the payload.
func schemaID(ev *Event, f Format) error {
	if id, ok := FramedSchemaID(ev.Payload); ok {
		ev.SchemaID = id
		return nil
	}
	if f.Registry() && len(ev.Payload) > 0 {
		_, err := SchemaIDOf(ev.Payload)
		return fmt.Errorf("the %s format's value is not framed: %w", f, err)
	}
	return nil
}

// fields are an event's standard fields as the record carries them, with
// the names its format gives them (for the error messages).
type fields struct {
	id, eventType, aggType, version, schema                string
	idName, typeName, aggTypeName, versionName, schemaName string
}

// apply validates f and sets ev's fields.
func (f fields) apply(ev *Event) error {
	if f.id == "" {
		return fmt.Errorf("no %s", f.idName)
	}
	id, err := uuid.Parse(f.id)
	if err != nil {
		return fmt.Errorf("%s %q is not a UUID", f.idName, f.id)
	}
	ev.ID = id.String()
	if ev.AggregateID == "" {
		return errors.New("empty key (aggregate_id)")
	}
	ev.AggregateType, ev.EventType = f.aggType, f.eventType
	if ev.AggregateType == "" || ev.EventType == "" {
		return fmt.Errorf("missing %s or %s", f.aggTypeName, f.typeName)
	}
	if ev.AggregateVersion, err = strconv.ParseInt(f.version, 10, 64); err != nil {
		return fmt.Errorf("%s %q is not an integer", f.versionName, f.version)
	}
	n, err := strconv.Atoi(f.schema)
	if err != nil {
		return fmt.Errorf("%s %q is not an integer", f.schemaName, f.schema)
	}
	ev.SchemaVersion = n
	return nil
}

// headerFields reads the native and debezium formats: the event in
// headers (the event id in idHeader, named idName in errors), the rest
// into ev.Headers.
func headerFields(ev *Event, headers []kafka.Header, idHeader, idName string) (fields, error) {
	f := fields{idName: idName, typeName: HeaderEventType + " header", aggTypeName: HeaderAggregateType + " header",
		versionName: HeaderAggregateVersion, schemaName: HeaderSchemaVersion}
	var seen [5]bool
	for _, h := range headers {
		slot := -1
		switch h.Key {
		case idHeader:
			slot = 0
		case HeaderEventType:
			slot = 1
		case HeaderSchemaVersion:
			slot = 2
		case HeaderAggregateType:
			slot = 3
		case HeaderAggregateVersion:
			slot = 4
		}
		if slot < 0 {
			if ev.Headers == nil {
				ev.Headers = make(map[string]string, 2)
			}
			ev.Headers[h.Key] = string(h.Value)
			continue
		}
		if seen[slot] {
			continue
		}
		seen[slot] = true
		switch slot {
		case 0:
			f.id = string(h.Value)
		case 1:
			f.eventType = string(h.Value)
		case 2:
			f.schema = string(h.Value)
		case 3:
			f.aggType = string(h.Value)
		case 4:
			f.version = string(h.Value)
		}
	}
	return f, nil
}

// CloudEvents attributes the relay sets (the rest of a CloudEvent's
// attributes and extensions go to Event.Headers as ce_<name>).
var ceStandard = map[string]bool{
	"specversion": true, "id": true, "source": true, "type": true, "subject": true, "time": true,
	"datacontenttype": true, "dataschema": true, "aggregatetype": true, "aggregateversion": true, "schemaversion": true,
}

// cloudEventFields reads a CloudEvent: structured when the content-type
// is an event format, else binary.
func cloudEventFields(ev *Event, m kafka.Message) (fields, error) {
	f := fields{idName: "id attribute", typeName: "type attribute", aggTypeName: "aggregatetype attribute",
		versionName: "aggregateversion attribute", schemaName: "schemaversion attribute"}
	attrs := map[string]string{}
	structured := false
	for _, h := range m.Headers {
		k := strings.ToLower(h.Key)
		if k == HeaderContentType && isStructuredCE(h.Value) {
			structured = true
			ct := strings.ToLower(string(h.Value))
			if base, _, _ := strings.Cut(ct, ";"); strings.TrimSpace(base) != "application/cloudevents+json" {
				return f, fmt.Errorf("CloudEvents event format %q is not supported (application/cloudevents+json is)", h.Value)
			}
		}
	}
	for _, h := range m.Headers {
		k := strings.ToLower(h.Key)
		if name, ok := strings.CutPrefix(k, "ce_"); ok && !structured {
			if _, dup := attrs[name]; !dup {
				attrs[name] = string(h.Value)
			}
			continue
		}
		if k == HeaderContentType {
			continue
		}
		if ev.Headers == nil {
			ev.Headers = make(map[string]string, 2)
		}
		ev.Headers[h.Key] = string(h.Value)
	}
	if structured {
		var err error
		if attrs, ev.Payload, err = parseStructuredEvent(m.Value); err != nil {
			return f, err
		}
	}
	if v, ok := attrs["specversion"]; !ok {
		return f, errors.New("not a CloudEvent: no specversion")
	} else if v != "1.0" {
		return f, fmt.Errorf("CloudEvents specversion %q is not supported (1.0 is)", v)
	}
	for name, v := range attrs {
		if !ceStandard[name] {
			if ev.Headers == nil {
				ev.Headers = make(map[string]string, 2)
			}
			ev.Headers["ce_"+name] = v
		}
	}
	f.id, f.eventType, f.aggType = attrs["id"], attrs["type"], attrs["aggregatetype"]
	f.version, f.schema = attrs["aggregateversion"], attrs["schemaversion"]
	if s := attrs["subject"]; s != "" {
		ev.AggregateID = s
	}
	return f, nil
}

// parseStructuredEvent reads a JSON event format value: its attributes (as
// text: strings unquoted, other values as JSON) and its data (inline JSON
// as is, a JSON string's text for a non-JSON content type, or
// data_base64 decoded).
func parseStructuredEvent(value []byte) (map[string]string, []byte, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(value, &doc); err != nil {
		return nil, nil, fmt.Errorf("structured CloudEvent: %v", err)
	}
	attrs := make(map[string]string, len(doc))
	for k, raw := range doc {
		if k == "data" || k == "data_base64" {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			s = string(raw)
		}
		attrs[k] = s
	}
	var data []byte
	if raw, ok := doc["data_base64"]; ok {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, errors.New("structured CloudEvent: data_base64 is not a string")
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, nil, fmt.Errorf("structured CloudEvent: data_base64: %v", err)
		}
		data = b
	} else if raw, ok := doc["data"]; ok {
		data = []byte(raw)
		if ct, ok := attrs["datacontenttype"]; ok && !isJSONType(ct) && len(raw) > 0 && raw[0] == '"' {
			var s string
			if err := json.Unmarshal(raw, &s); err == nil {
				data = []byte(s)
			}
		}
	}
	return attrs, data, nil
}

// isJSONType reports whether a media type is JSON (application/json,
// text/json or a +json suffix), whose data a JSON event holds inline.
func isJSONType(ct string) bool {
	base, _, _ := strings.Cut(strings.ToLower(ct), ";")
	base = strings.TrimSpace(base)
	return base == "application/json" || base == "text/json" || strings.HasSuffix(base, "+json")
}
