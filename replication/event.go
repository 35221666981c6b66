package replication

import (
	"encoding/hex"
	"fmt"
	"time"
	"unsafe"

	"github.com/jackc/pglogrepl"
)

// Event is one outbox row decoded from the WAL. It owns its memory: the
// stream's receive buffer is reused, so every field is copied once into a
// single allocation per event.
type Event struct {
	// LSN is the WAL position of the INSERT; CommitTime is its
	// transaction's commit time (the Kafka record timestamp).
	LSN        pglogrepl.LSN
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
}

// Size is the event's accounted size in the in-flight window.
func (e *Event) Size() int {
	return len(e.EventID) + len(e.AggregateType) + len(e.AggregateID) + len(e.AggregateVersion) +
		len(e.EventType) + len(e.SchemaVersion) + len(e.Payload) + len(e.Headers)
}

// RowError is a row that cannot become an event: a NULL in a required
// column or a value that does not decode. The stream stops on it with the
// LSN held, so nothing is skipped.
type RowError struct {
	LSN     pglogrepl.LSN
	EventID string
	Column  string
	Reason  string
}

func (e *RowError) Error() string {
	id := e.EventID
	if id == "" {
		id = "unknown"
	}
	return fmt.Sprintf("outbox row at LSN %s (event_id %s): column %q: %s", e.LSN, id, e.Column, e.Reason)
}

// decodeEvent maps an insert's tuple to an Event through rel's column
// positions, which come from the Relation message by name.
func decodeEvent(rel *relation, cols []tupleColumn, lsn pglogrepl.LSN, commit time.Time) (*Event, error) {
	if len(cols) != rel.numColumns {
		return nil, &RowError{LSN: lsn, Column: "*", Reason: fmt.Sprintf("tuple has %d columns, relation %d", len(cols), rel.numColumns)}
	}
	ev := &Event{LSN: lsn, CommitTime: commit}
	var eventID []byte
	if c := cols[rel.idx[colEventID]]; c.Kind == colText {
		eventID = c.Data
	}
	// One buffer for every field; bytea payloads shrink by half when
	// hex-decoded, so the text length is an upper bound.
	total := 0
	for _, i := range rel.idx {
		if i >= 0 {
			total += len(cols[i].Data)
		}
	}
	buf := make([]byte, 0, total)
	field := func(col int, required bool) (string, error) {
		i := rel.idx[col]
		if i < 0 {
			return "", nil
		}
		c := cols[i]
		switch c.Kind {
		case colText:
		case colNull:
			if required {
				return "", &RowError{LSN: lsn, EventID: string(eventID), Column: columnNames[col], Reason: "is NULL"}
			}
			return "", nil
		default:
			return "", &RowError{LSN: lsn, EventID: string(eventID), Column: columnNames[col], Reason: fmt.Sprintf("unexpected value kind %q", c.Kind)}
		}
		start := len(buf)
		buf = append(buf, c.Data...)
		b := buf[start:]
		return unsafe.String(unsafe.SliceData(b), len(b)), nil
	}
	var err error
	set := func(dst *string, col int) {
		if err == nil {
			*dst, err = field(col, true)
		}
	}
	set(&ev.EventID, colEventID)
	set(&ev.AggregateType, colAggregateType)
	set(&ev.AggregateID, colAggregateID)
	set(&ev.AggregateVersion, colAggregateVersion)
	set(&ev.EventType, colEventType)
	set(&ev.SchemaVersion, colSchemaVersion)
	if err != nil {
		return nil, err
	}
	if i := rel.idx[colHeaders]; i >= 0 && cols[i].Kind == colText {
		start := len(buf)
		buf = append(buf, cols[i].Data...)
		ev.Headers = buf[start:len(buf):len(buf)]
	}
	p := cols[rel.idx[colPayload]]
	switch p.Kind {
	case colText:
	case colNull:
		return nil, &RowError{LSN: lsn, EventID: ev.EventID, Column: "payload", Reason: "is NULL"}
	default:
		return nil, &RowError{LSN: lsn, EventID: ev.EventID, Column: "payload", Reason: fmt.Sprintf("unexpected value kind %q", p.Kind)}
	}
	start := len(buf)
	if rel.payloadBytea {
		// bytea's text output is "\x" followed by hex digits.
		if len(p.Data) < 2 || p.Data[0] != '\\' || p.Data[1] != 'x' {
			return nil, &RowError{LSN: lsn, EventID: ev.EventID, Column: "payload", Reason: "bytea value not in hex format (set bytea_output = 'hex')"}
		}
		hx := p.Data[2:]
		buf = buf[:start+len(hx)/2]
		if _, err := hex.Decode(buf[start:], hx); err != nil {
			return nil, &RowError{LSN: lsn, EventID: ev.EventID, Column: "payload", Reason: "bytea hex: " + err.Error()}
		}
	} else {
		buf = append(buf, p.Data...)
	}
	ev.Payload = buf[start:len(buf):len(buf)]
	return ev, nil
}
