package record

// This file holds the registry formats' optional key schema (issue 48,
// Config.KeySchema): the record key, aggregate_id, encoded as the string
// of the format's schema language and framed like the value, as a
// producer with Confluent's serializers for keys writes it. Partitioning
// does not change: the relay partitions by the aggregate_id's bytes, not
// by the framed key.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record/internal/wire"
)

// KeyRef is the subject and version the record key of an event on topic
// is encoded with under Config.KeySchema: the latest version of
// "<topic>-key", whatever the value's subject strategy and version source.
// A key is a string, so its schema has no record name to name a subject
// by (Confluent's serializers take key.subject.name.strategy apart from
// the value's, TopicNameStrategy by default), and it does not evolve with
// the row's schema_version.
func (c Config) KeyRef(topic string) SchemaRef {
	return SchemaRef{Subject: topic + "-key", Version: "latest"}
}

// AppendKey appends aggregateID as the Confluent-framed key of s to dst:
// Avro's binary string (s must be the primitive "string"), or JSON
// Schema's JSON string, checked against s. A schema that is not a
// string's is an error wrapping ErrSchemaInvalid; an aggregate id a JSON
// Schema refuses is another error, naming the reason.
func (s *Schema) AppendKey(dst []byte, aggregateID string) ([]byte, error) {
	switch {
	case s.avro != nil:
		if !s.avro.IsString() {
			return nil, fmt.Errorf("%w: schema %d is not the Avro primitive \"string\", the schema of a key that is the aggregate_id", ErrSchemaInvalid, s.ID)
		}
		dst = wire.AppendFrame(dst, s.ID, nil, nil)
		dst = binary.AppendVarint(dst, int64(len(aggregateID)))
		return append(dst, aggregateID...), nil
	case s.json != nil:
		body, err := json.Marshal(aggregateID)
		if err != nil {
			return nil, err
		}
		if err := s.json.Check(body); err != nil {
			return nil, fmt.Errorf("the aggregate_id as a JSON string: %w", err)
		}
		return wire.AppendFrame(dst, s.ID, nil, body), nil
	case s.proto != nil:
		return nil, fmt.Errorf("%w: schema %d is a Protobuf schema: a Protobuf key has no string form (use an Avro or JSON Schema key, or no key schema)", ErrSchemaInvalid, s.ID)
	}
	return nil, errors.New("record: a Schema must come from ParseSchema")
}

// EncodeKey replaces msg's key, ev's aggregate_id, with the key framed
// with s, registered as ref (Config.KeySchema; KeyRef names ref). msg is
// the record EncodeRegistered made of ev. Partition msg by ev's
// aggregate_id (murmur2 over its bytes, as without a key schema), not by
// its new key: a Java producer with KafkaAvroSerializer keys partitions by
// the framed bytes, so its records of an aggregate land elsewhere. A key s cannot encode is an
// *EncodeError (CodeSchema) naming the key subject; it wraps
// ErrSchemaInvalid when s is not a string's schema.
func (e *Encoder) EncodeKey(msg *kafka.Message, ev *Row, ref SchemaRef, s *Schema) error {
	if !e.cfg.KeySchema {
		return errors.New("record: EncodeKey needs Config.KeySchema")
	}
	k, err := s.AppendKey(make([]byte, 0, len(ev.AggregateID)+8), ev.AggregateID)
	if err != nil {
		return &EncodeError{EventID: ev.EventID, AggregateID: ev.AggregateID, Code: CodeSchema,
			Reason: fmt.Sprintf("key subject %s version %s (schema id %d): %v", ref.Subject, ref.Version, s.ID, err), Err: err}
	}
	msg.Key = k
	return nil
}

// DecodeKey returns the aggregate_id a record key holds, and the schema
// id of a framed key (0 for a plain one). A plain key is the aggregate_id
// itself. A framed key (the magic byte 0, which no aggregate_id starts
// with: PostgreSQL text holds no NUL) is decoded in format f: FormatAvro's
// binary string, FormatJSONSchema's JSON string; another format (or the
// empty one, detecting) reads a JSON string when the body is one, an Avro
// string otherwise. A framed key that is neither, or not valid UTF-8, is
// an error. No registry is asked: a key schema is a string's.
func DecodeKey(key []byte, f Format) (aggregateID string, schemaID uint32, err error) {
	if len(key) == 0 || key[0] != 0 {
		return string(key), 0, nil
	}
	id, body, err := wire.Unframe(key)
	if err != nil {
		return "", 0, fmt.Errorf("the key: %w", unframeErr(err))
	}
	var s string
	var ok bool
	switch f {
	case FormatAvro:
		s, ok = avroString(body)
	case FormatJSONSchema:
		s, ok = jsonString(body)
	default:
		if s, ok = jsonString(body); !ok {
			s, ok = avroString(body)
		}
	}
	if !ok || !utf8.ValidString(s) {
		return "", id, fmt.Errorf("the key is framed (schema id %d) but its body is not a string of the %s key schema", id, keyFormatName(f))
	}
	return s, id, nil
}

func keyFormatName(f Format) string {
	if f == FormatAvro || f == FormatJSONSchema {
		return string(f)
	}
	return "avro or json-schema"
}

// avroString reads body as exactly one Avro string.
func avroString(body []byte) (string, bool) {
	n, k := binary.Varint(body)
	if k <= 0 || n < 0 || int64(len(body)-k) != n {
		return "", false
	}
	return string(body[k:]), true
}

// jsonString reads body as exactly one JSON string.
func jsonString(body []byte) (string, bool) {
	if len(body) < 2 || body[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(body, &s) != nil {
		return "", false
	}
	return s, true
}
