// Package record is the Kafka record format of outbox-relay: how an outbox
// event becomes a Kafka record, and how a record becomes an event again
// (docs/formats.md). It serves both ends of the wire, as pgproto3 does
// for PostgreSQL's protocol: the relay encodes with it (Config, Encoder)
// and the inbox decodes with it (Decode, DecodeFormat). Any other Go
// consumer may import it to read the relay's records without the inbox:
// Decode takes a kafka-go message, whatever read it.
//
// # Formats
//
// Every format keys a record by aggregate_id and stamps it with the
// outbox transaction's commit time; they differ in the value and the
// headers:
//
//   - FormatNative, the relay's own: the payload as the value, the
//     outbox columns in the event_id, event_type, schema_version,
//     aggregate_type and aggregate_version headers, then the row's own
//     headers.
//   - FormatDebezium: the record of Debezium's Outbox Event Router with
//     the configuration docs/formats.md gives, optionally with the JSON
//     payload expanded as table.expand.json.payload=true writes it
//     (Config.DebeziumExpandJSON).
//   - FormatCloudEvents: a CloudEvents 1.0 event in the Kafka protocol
//     binding, in binary or structured content mode (CloudEventsMode).
//
// With Config.TombstoneOnNullPayload an outbox row whose payload is NULL
// becomes a tombstone (a null value) in every format.
//
// # Encoding
//
// NewEncoder validates a Config once; Encoder.Encode then maps each
// Row (an outbox row as the relay reads it from the WAL or the table) to
// its kafka.Message, or to an *EncodeError for an event that can never
// become a record. Config.Encode does both for a single event. Whatever a
// record carries as text (the key, header names and values, JSON strings)
// is valid UTF-8: a field that is not is refused (an *InvalidUTF8Error
// naming it), never replaced with U+FFFD; a payload the format carries as
// bytes passes unchanged.
//
// # Decoding
//
// Decode reads a record in any of the formats back into an Event,
// detecting the format from the headers (DetectFormat); DecodeFormat
// reads one given format. A record that is not an outbox event is a
// *DecodeError. Encode then Decode gives back every column of an outbox
// row (a UUID event_id, integer versions, a JSON object of strings as
// headers), in every format and mode: a NULL payload as a tombstone (a
// nil Payload), an expanded Debezium payload as its expansion.
package record
