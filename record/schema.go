package record

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record/internal/avrojson"
	"github.com/outbox-relay/outbox-relay/record/internal/jsoncheck"
	"github.com/outbox-relay/outbox-relay/record/internal/pbjson"
	"github.com/outbox-relay/outbox-relay/record/internal/wire"
)

// The schema registry formats (issue 48; docs/schemas.md): the native
// record, whose value is the payload encoded with a schema a registry
// holds, in the Confluent wire format: the magic byte 0, the schema's id
// (4 bytes, big-endian), for Protobuf the message-index list, then the
// body. The headers are the native format's.
const (
	// FormatAvro encodes the JSON payload into Avro binary.
	FormatAvro Format = "avro"
	// FormatProtobuf encodes the JSON payload (protojson's mapping) into
	// Protobuf binary.
	FormatProtobuf Format = "protobuf"
	// FormatJSONSchema validates the JSON payload against a JSON Schema;
	// the body is the payload's text.
	FormatJSONSchema Format = "json-schema"
)

// Registry reports whether records of f are encoded with a registered
// schema (EncodeRegistered), not by Encode.
func (f Format) Registry() bool {
	return f == FormatAvro || f == FormatProtobuf || f == FormatJSONSchema
}

// SchemaType is the registry's name of the schema type of the format:
// AVRO, PROTOBUF or JSON; "" for the other formats.
func (f Format) SchemaType() string {
	switch f {
	case FormatAvro:
		return SchemaTypeAvro
	case FormatProtobuf:
		return SchemaTypeProtobuf
	case FormatJSONSchema:
		return SchemaTypeJSON
	}
	return ""
}

// The registry's schema types (its schemaType field; AVRO when absent).
const (
	SchemaTypeAvro     = "AVRO"
	SchemaTypeProtobuf = "PROTOBUF"
	SchemaTypeJSON     = "JSON"
)

// SubjectStrategy is how the registry subject of a record's value schema
// is named, as Confluent's serializers name it.
type SubjectStrategy string

// Subject strategies.
const (
	// SubjectTopic is TopicNameStrategy, "<topic>-value": one schema (and
	// its versions) per topic. The empty strategy is this one.
	SubjectTopic SubjectStrategy = "topic"
	// SubjectRecord is RecordNameStrategy, "<event_type>": the event type
	// names the schema, whatever the topic; with FormatProtobuf it is also
	// the message's full name.
	SubjectRecord SubjectStrategy = "record"
	// SubjectTopicRecord is TopicRecordNameStrategy,
	// "<topic>-<event_type>".
	SubjectTopicRecord SubjectStrategy = "topic-record"
)

// ParseSubjectStrategy validates a strategy name; "" is SubjectTopic.
func ParseSubjectStrategy(s string) (SubjectStrategy, error) {
	switch v := SubjectStrategy(s); v {
	case "", SubjectTopic:
		return SubjectTopic, nil
	case SubjectRecord, SubjectTopicRecord:
		return v, nil
	}
	return "", fmt.Errorf("subject strategy %q: use topic, record or topic-record", s)
}

// SchemaVersionSource says which registered version of the subject
// encodes an event.
type SchemaVersionSource string

// Schema version sources.
const (
	// VersionFromRow takes the row's schema_version as the subject's
	// version: an event is encoded with the schema it was written for,
	// and a row of an unregistered version is poison. The empty source is
	// this one.
	VersionFromRow SchemaVersionSource = "row"
	// VersionLatest takes the subject's latest version, whatever the row
	// says (its schema_version header is still the row's).
	VersionLatest SchemaVersionSource = "latest"
)

// ParseSchemaVersionSource validates a source name; "" is VersionFromRow.
func ParseSchemaVersionSource(s string) (SchemaVersionSource, error) {
	switch v := SchemaVersionSource(s); v {
	case "", VersionFromRow:
		return VersionFromRow, nil
	case VersionLatest:
		return v, nil
	}
	return "", fmt.Errorf("schema version source %q: use row or latest", s)
}

// ErrSchemaNotFound is a registry's answer that a subject, version or
// schema id does not exist (Confluent's error codes 40401, 40402 and
// 40403): an event encoded with it is poison until someone registers it.
// A registry client wraps it; every other registry error is transient.
var ErrSchemaNotFound = errors.New("schema not found in the registry")

// ErrSchemaInvalid is a registered schema the relay cannot encode with: a
// schema type it does not know, text that does not parse, references it
// cannot resolve. Registered versions never change, so an event encoded
// with it is poison; a registry client wraps it.
var ErrSchemaInvalid = errors.New("registered schema cannot be used")

// CodeSchema is the EncodeError code of an event whose payload does not
// match its schema, or whose subject or version cannot be named from the
// row (an empty event_type with a record strategy, a schema_version that
// is not a version number).
const CodeSchema = "schema_mismatch"

// SchemaRef names the registered schema an event is encoded with: its
// subject and version. Version is "latest" or a version number.
type SchemaRef struct {
	Subject string
	Version string
}

// SchemaRef is the subject and version ev's value is encoded with on
// topic, by the configuration's strategy and version source. An error is
// an *EncodeError (CodeSchema).
func (c Config) SchemaRef(topic string, ev *Row) (SchemaRef, error) {
	fail := func(reason string) (SchemaRef, error) {
		return SchemaRef{}, &EncodeError{EventID: ev.EventID, AggregateID: ev.AggregateID, Code: CodeSchema, Reason: reason}
	}
	var ref SchemaRef
	switch c.SubjectStrategy {
	case "", SubjectTopic:
		ref.Subject = topic + "-value"
	case SubjectRecord, SubjectTopicRecord:
		if ev.EventType == "" {
			return fail(fmt.Sprintf("event_type is empty: the %s subject strategy names the schema by it", c.SubjectStrategy))
		}
		ref.Subject = ev.EventType
		if c.SubjectStrategy == SubjectTopicRecord {
			ref.Subject = topic + "-" + ev.EventType
		}
	default:
		return fail(fmt.Sprintf("subject strategy %q: use topic, record or topic-record", c.SubjectStrategy))
	}
	if c.SchemaVersion == VersionLatest {
		ref.Version = "latest"
		return ref, nil
	}
	if n, err := strconv.ParseUint(ev.SchemaVersion, 10, 31); err != nil || n == 0 {
		return fail(fmt.Sprintf("schema_version %q is not a registry version (1, 2, ...) of subject %s", truncateText(ev.SchemaVersion), ref.Subject))
	}
	ref.Version = ev.SchemaVersion
	return ref, nil
}

func truncateText(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// Schema is a registered schema, parsed: the registry's id and the
// compiled form of its text, for one of the registry formats.
type Schema struct {
	ID   uint32
	Type string // SchemaTypeAvro, SchemaTypeProtobuf or SchemaTypeJSON

	avro  *avrojson.Schema
	proto *pbjson.Schema
	json  *jsoncheck.Schema

	// messages caches the Protobuf messages looked up by name (at most
	// the schema's own messages).
	mu       sync.Mutex
	messages map[string]*pbjson.Message
}

// ParseSchema compiles a registered schema: text as the registry returns
// it, schemaType its schemaType ("" is AVRO), refs the text of the schemas
// it references, by the name it references them with.
func ParseSchema(ctx context.Context, id uint32, schemaType, text string, refs map[string]string) (*Schema, error) {
	s := &Schema{ID: id, Type: schemaType}
	var err error
	switch schemaType {
	case "", SchemaTypeAvro:
		s.Type = SchemaTypeAvro
		if len(refs) > 0 {
			return nil, fmt.Errorf("schema %d: Avro schema references are not supported yet: inline the referenced types", id)
		}
		s.avro, err = avrojson.Parse(text)
	case SchemaTypeProtobuf:
		s.proto, err = pbjson.Parse(ctx, text, refs)
	case SchemaTypeJSON:
		s.json, err = jsoncheck.Compile(text, refs)
	default:
		return nil, fmt.Errorf("schema %d: schema type %q: the relay encodes AVRO, PROTOBUF and JSON", id, schemaType)
	}
	if err != nil {
		return nil, fmt.Errorf("schema %d: %w", id, err)
	}
	return s, nil
}

// message is the Protobuf message name names ("" the first).
func (s *Schema) message(name string) (*pbjson.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.messages[name]; ok {
		return m, nil
	}
	m, err := s.proto.Message(name)
	if err != nil {
		return nil, err
	}
	if s.messages == nil {
		s.messages = map[string]*pbjson.Message{}
	}
	s.messages[name] = m
	return m, nil
}

// FramedSchemaID reports whether payload is already a Confluent-framed
// value (a bytea payload an application serialized itself) and returns
// its schema id. A JSON payload never starts with the magic byte 0.
func FramedSchemaID(payload []byte) (uint32, bool) {
	if len(payload) == 0 || payload[0] != 0 {
		return 0, false // the common case, without building Unframe's error
	}
	id, _, err := wire.Unframe(payload)
	return id, err == nil
}

// AppendValue appends the Confluent-framed value of payload encoded with
// s to dst. message names the Protobuf message ("" the schema's first).
// An error names the first offending field.
func (s *Schema) AppendValue(dst, payload []byte, message string) ([]byte, error) {
	switch {
	case s.avro != nil:
		return s.avro.Append(wire.AppendFrame(dst, s.ID, nil, nil), payload)
	case s.proto != nil:
		m, err := s.message(message)
		if err != nil {
			return nil, err
		}
		return m.Append(wire.AppendFrame(dst, s.ID, m.Indexes, nil), payload)
	case s.json != nil:
		if err := s.json.Check(payload); err != nil {
			return nil, err
		}
		return wire.AppendFrame(dst, s.ID, nil, payload), nil
	}
	return nil, errors.New("record: a Schema must come from ParseSchema")
}

// EncodeRegistered is Encode for the registry formats: the native
// record, its value the payload encoded with s, registered as ref. A
// payload that is already framed passes unchanged (the caller checked its
// id belongs to ref's subject). A payload that does not match is an
// *EncodeError (CodeSchema) naming the subject, the version and the first
// offending field.
func (e *Encoder) EncodeRegistered(topic string, ev *Row, ref SchemaRef, s *Schema) (kafka.Message, error) {
	if !e.cfg.Format.Registry() {
		return kafka.Message{}, fmt.Errorf("record format %q has no registered schema: use Encode", e.cfg.Format)
	}
	msg, err := e.encode(topic, ev) // the native record: checks, key, headers
	if err != nil || msg.Value == nil {
		return msg, err // an invalid row, or a tombstone: no value to encode
	}
	if _, framed := FramedSchemaID(ev.Payload); framed {
		return msg, nil
	}
	name := ""
	if e.cfg.SubjectStrategy == SubjectRecord || e.cfg.SubjectStrategy == SubjectTopicRecord {
		name = ev.EventType
	}
	v, err := s.AppendValue(make([]byte, 0, len(ev.Payload)+8), ev.Payload, name)
	if err != nil {
		return kafka.Message{}, &EncodeError{EventID: ev.EventID, AggregateID: ev.AggregateID, Code: CodeSchema,
			Reason: fmt.Sprintf("subject %s version %s (schema id %d): %v", ref.Subject, ref.Version, s.ID, err), Err: err}
	}
	msg.Value = v
	return msg, nil
}

// ErrNotFramed is a value that is not in the Confluent wire format.
var ErrNotFramed = errors.New("record: not a schema registry value")

// SchemaIDOf returns the schema id of a Confluent-framed value, or an
// error wrapping ErrNotFramed.
func SchemaIDOf(value []byte) (uint32, error) {
	id, _, err := wire.Unframe(value)
	return id, unframeErr(err)
}

// unframeErr is wire's error in record's terms: a value that is not
// framed wraps ErrNotFramed.
func unframeErr(err error) error {
	if errors.Is(err, wire.ErrNotFramed) {
		return fmt.Errorf("%w: %w", ErrNotFramed, err)
	}
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// DecodeValue decodes a Confluent-framed value written with s (its schema
// id is s.ID) into JSON: the form of the outbox payload it was encoded
// from, for a handler that wants JSON rather than the body's bytes.
func (s *Schema) DecodeValue(value []byte) ([]byte, error) {
	var id uint32
	var idx []int
	var body []byte
	var err error
	if s.proto != nil {
		id, idx, body, err = wire.UnframeProtobuf(value)
	} else {
		id, body, err = wire.Unframe(value)
	}
	if err := unframeErr(err); err != nil {
		return nil, err
	}
	if id != s.ID {
		return nil, fmt.Errorf("record: the value's schema id is %d, not %d", id, s.ID)
	}
	switch {
	case s.avro != nil:
		return s.avro.JSON(body)
	case s.proto != nil:
		m, err := s.proto.MessageAt(idx)
		if err != nil {
			return nil, err
		}
		return m.JSON(body)
	case s.json != nil:
		return body, nil
	}
	return nil, errors.New("record: a Schema must come from ParseSchema")
}
