package record

import "time"

// Row is an outbox row as a record is made of it, whoever read it: the
// relay from the WAL (replication.WALEvent carries one), a back-fill or a
// replay from the table, dead letters from their own table. It holds the
// columns as text, as PostgreSQL renders them, so a record carries them
// verbatim, and it knows nothing of where it was read: record, and with
// it a consumer application (inbox), links no replication stack.
type Row struct {
	// CommitTime is the row's transaction's commit time: the record
	// timestamp.
	CommitTime time.Time

	EventID       string
	AggregateType string
	AggregateID   string
	// AggregateVersion and SchemaVersion are kept as PostgreSQL rendered
	// them: they become Kafka header values verbatim.
	AggregateVersion string
	EventType        string
	SchemaVersion    string
	// Payload is the payload column: jsonb/json/text as rendered by
	// PostgreSQL, bytea decoded to its raw bytes.
	Payload []byte
	// Headers is the raw JSON of the headers column, nil when NULL or
	// when the table has no such column.
	Headers []byte

	// Invalid, when set, says why the row cannot become a record (a NULL
	// in a required column, say); the relay dead-letters such rows.
	// InvalidNullPayload is a NULL payload and nothing else wrong: the
	// encoder may make such a row a tombstone instead.
	Invalid string
}

// InvalidNullPayload is Row.Invalid of a row whose payload is NULL and
// whose other columns are all valid (the payload is checked last).
const InvalidNullPayload = `column "payload" is NULL`
