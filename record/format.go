package record

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Format is the shape of the Kafka records of the outbox events
// (docs/formats.md). Every format keys a record by aggregate_id; they
// differ in the value and the headers.
//
// The empty Format means FormatNative to the encoder (Config.Format) and
// "detect it from the headers" to DecodeFormat.
type Format string

// Record formats.
const (
	// FormatNative is the relay's own record: value = payload, headers
	// event_id, event_type, schema_version, aggregate_type,
	// aggregate_version, then the row's headers. The empty Format is
	// native too, when encoding.
	FormatNative Format = "native"
	// FormatDebezium is the record Debezium's Outbox Event Router emits
	// for the outbox table with the configuration in docs/formats.md:
	// value = payload, headers id, event_type, aggregate_type,
	// aggregate_version, schema_version, then the row's headers.
	FormatDebezium Format = "debezium"
	// FormatCloudEvents is a CloudEvents 1.0 event in the Kafka protocol
	// binding, in binary or structured content mode (CloudEventsMode).
	FormatCloudEvents Format = "cloudevents"
)

// Formats lists the record formats, the default first.
func Formats() []Format { return []Format{FormatNative, FormatDebezium, FormatCloudEvents} }

// ParseFormat validates a record format name; "" is FormatNative.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case "", FormatNative:
		return FormatNative, nil
	case FormatDebezium, FormatCloudEvents, FormatAvro, FormatProtobuf, FormatJSONSchema:
		return f, nil
	}
	return "", fmt.Errorf("record format %q: use native, debezium, cloudevents, avro, protobuf or json-schema", s)
}

// CloudEventsMode is the content mode of FormatCloudEvents records.
type CloudEventsMode string

// CloudEvents content modes (the Kafka protocol binding's).
const (
	// CloudEventsBinary puts the attributes in ce_* headers and the
	// payload, unchanged, in the value. The empty mode is binary too.
	CloudEventsBinary CloudEventsMode = "binary"
	// CloudEventsStructured puts the whole event, attributes and data, in
	// the value as a JSON event (content-type application/cloudevents+json).
	CloudEventsStructured CloudEventsMode = "structured"
)

// ParseCloudEventsMode validates a content mode name; "" is binary.
func ParseCloudEventsMode(s string) (CloudEventsMode, error) {
	switch m := CloudEventsMode(s); m {
	case "", CloudEventsBinary:
		return CloudEventsBinary, nil
	case CloudEventsStructured:
		return m, nil
	}
	return "", fmt.Errorf("CloudEvents mode %q: use binary or structured", s)
}

// CheckCloudEventsSource validates a CloudEvents source attribute: a
// non-empty URI-reference (RFC 3986), e.g. /orders-service or
// urn:example:orders.
func CheckCloudEventsSource(s string) error {
	if s == "" {
		return errors.New("the CloudEvents source is required with the cloudevents record format: a URI-reference naming the producer, e.g. /orders-service or urn:example:orders")
	}
	if i := invalidUTF8At(s); i >= 0 {
		// Every record carries it as text (ce_source, a JSON string).
		return fmt.Errorf("CloudEvents source: invalid UTF-8 at byte offset %d", i)
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return fmt.Errorf("CloudEvents source %q: a URI-reference has no white space", s)
	}
	if _, err := url.Parse(s); err != nil {
		return fmt.Errorf("CloudEvents source %q is not a URI-reference: %w", s, err)
	}
	return nil
}

// Config selects and tunes the record format of an encoder. Its zero
// value is the native format without tombstones.
type Config struct {
	// Format is the record format; "" is FormatNative.
	Format Format
	// CloudEventsSource is the source attribute of FormatCloudEvents
	// records (required with that format).
	CloudEventsSource string
	// CloudEventsMode is the content mode of FormatCloudEvents records;
	// "" is binary.
	CloudEventsMode CloudEventsMode
	// DebeziumExpandJSON writes FormatDebezium values as the router does
	// with table.expand.json.payload=true and the JsonConverter: the JSON
	// payload re-serialized compactly, null members dropped (see
	// docs/formats.md). Off, the value is the payload as stored. On, a
	// payload that is not valid UTF-8 has no JSON form: such an event is
	// an *EncodeError (CodeInvalidRow, an *InvalidUTF8Error).
	DebeziumExpandJSON bool
	// SubjectStrategy names the registry subject of a registry format's
	// value schema (SchemaRef); "" is SubjectTopic.
	SubjectStrategy SubjectStrategy
	// SchemaVersion says which version of the subject encodes an event;
	// "" is VersionFromRow.
	SchemaVersion SchemaVersionSource
	// KeySchema frames the record key too, in a registry format other
	// than FormatProtobuf: the aggregate_id as the format's string (Avro's
	// "string", JSON Schema's {"type":"string"}) with the id of the
	// latest schema of the key subject, "<topic>-key" (KeyRef), as
	// Confluent's serializers write a key; EncodeKey. The partition stays
	// the aggregate_id's (EncodeKey). Off, the key is the aggregate_id's
	// bytes, as a StringSerializer writes it.
	KeySchema bool
	// Registry is where the registry formats' schemas live; the other
	// formats do not use it.
	Registry RegistryConfig
	// TombstoneOnNullPayload turns an outbox row whose payload is NULL
	// into a record with the row's key and headers and a null value (a
	// tombstone, for compacted topics), in every format. Off, such a row
	// cannot be encoded (CodeInvalidRow: the relay dead-letters it).
	TombstoneOnNullPayload bool
}

// Validate checks the format and its options.
func (c Config) Validate() error {
	var errs []error
	f, err := ParseFormat(string(c.Format))
	errs = append(errs, err)
	if _, err := ParseCloudEventsMode(string(c.CloudEventsMode)); err != nil {
		errs = append(errs, err)
	}
	if f == FormatCloudEvents {
		errs = append(errs, CheckCloudEventsSource(c.CloudEventsSource))
	}
	if _, err := ParseSubjectStrategy(string(c.SubjectStrategy)); err != nil {
		errs = append(errs, err)
	}
	if _, err := ParseSchemaVersionSource(string(c.SchemaVersion)); err != nil {
		errs = append(errs, err)
	}
	if c.KeySchema && err == nil {
		errs = append(errs, CheckKeySchema(f))
	}
	return errors.Join(errs...)
}

// CheckKeySchema says why format f cannot frame its keys (Config.KeySchema),
// nil when it can: only the registry formats have a schema, and Protobuf
// has no string form for a key (a Protobuf schema is messages; Confluent's
// KafkaProtobufSerializer serializes only a message, so Protobuf shops key
// their records with a StringSerializer, which is the key without the
// option).
func CheckKeySchema(f Format) error {
	switch f {
	case FormatAvro, FormatJSONSchema:
		return nil
	case FormatProtobuf:
		return errors.New("a key schema is not available with the protobuf format: Protobuf has no string schema (a key of Confluent's Protobuf serializer is a message); keep the plain string key, as a StringSerializer writes it")
	}
	return fmt.Errorf("a key schema is only used with a registry format (avro or json-schema; the format is %s)", f)
}
