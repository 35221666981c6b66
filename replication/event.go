package replication

import (
	"encoding/hex"
	"fmt"
	"time"
	"unsafe"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/record"
)

// WALEvent is one outbox row decoded from the WAL. It owns its memory: the
// stream's receive buffer is reused, so every field is copied once into a
// single allocation per event.
type WALEvent struct {
	// Row is the row's columns and commit time, what a record is made
	// of (record.Row: its fields are the WALEvent's).
	record.Row

	// LSN is the WAL position of the INSERT.
	LSN pglogrepl.LSN

	// TxLSN (the transaction's commit LSN, from Begin) and Ordinal (the
	// event's index among the transaction's outbox rows) order events
	// stably across redeliveries, unlike the insert's LSN, which a
	// multi-row insert shares between rows.
	TxLSN   pglogrepl.LSN
	Ordinal int
}

// InvalidNullPayload is record.InvalidNullPayload, WALEvent.Invalid of a row
// whose payload is NULL and whose other columns are all valid.
const InvalidNullPayload = record.InvalidNullPayload

// Position is an event's stable place in the commit order.
type Position struct {
	TxLSN   pglogrepl.LSN
	Ordinal int
}

// Pos returns the event's position.
func (e *WALEvent) Pos() Position { return Position{e.TxLSN, e.Ordinal} }

// Before reports whether p comes before q in commit order.
func (p Position) Before(q Position) bool {
	return p.TxLSN < q.TxLSN || p.TxLSN == q.TxLSN && p.Ordinal < q.Ordinal
}

// Size is the event's accounted size in the in-flight window.
func (e *WALEvent) Size() int {
	return len(e.EventID) + len(e.AggregateType) + len(e.AggregateID) + len(e.AggregateVersion) +
		len(e.EventType) + len(e.SchemaVersion) + len(e.Payload) + len(e.Headers)
}

// RowError is a row whose shape contradicts its relation: the stream
// stops on it with the LSN held, so nothing is skipped.
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

// decodeEvent maps an insert's tuple to a WALEvent through rel's column
// positions, which come from the Relation message by name. A value that
// cannot be mapped (a NULL in a required column, undecodable bytea) does
// not stop the stream: the event is returned with Invalid set, so the
// relay can dead-letter it with everything else the row held.
func decodeEvent(rel *relation, cols []tupleColumn, lsn pglogrepl.LSN, commit time.Time) (*WALEvent, error) {
	if len(cols) != rel.numColumns {
		return nil, &RowError{LSN: lsn, Column: "*", Reason: fmt.Sprintf("tuple has %d columns, relation %d", len(cols), rel.numColumns)}
	}
	ev := &WALEvent{Row: record.Row{CommitTime: commit}, LSN: lsn}
	// One buffer for every field; bytea payloads shrink by half when
	// hex-decoded, so the text length is an upper bound.
	total := 0
	for _, i := range rel.idx {
		if i >= 0 {
			total += len(cols[i].Data)
		}
	}
	buf := make([]byte, 0, total)
	invalid := func(col int, reason string) {
		if ev.Invalid == "" {
			ev.Invalid = fmt.Sprintf("column %q %s", columnNames[col], reason)
		}
	}
	// raw copies a column's text into buf; nil for NULL or an absent column.
	raw := func(col int) []byte {
		i := rel.idx[col]
		if i < 0 {
			return nil
		}
		c := cols[i]
		switch c.Kind {
		case colText:
		case colNull:
			if col != colHeaders {
				invalid(col, "is NULL")
			}
			return nil
		default:
			invalid(col, fmt.Sprintf("has unexpected value kind %q", c.Kind))
			return nil
		}
		start := len(buf)
		buf = append(buf, c.Data...)
		return buf[start:len(buf):len(buf)]
	}
	str := func(col int) string {
		b := raw(col)
		return unsafe.String(unsafe.SliceData(b), len(b))
	}
	ev.EventID = str(colEventID)
	ev.AggregateType = str(colAggregateType)
	ev.AggregateID = str(colAggregateID)
	ev.AggregateVersion = str(colAggregateVersion)
	ev.EventType = str(colEventType)
	ev.SchemaVersion = str(colSchemaVersion)
	ev.Headers = raw(colHeaders)
	p := cols[rel.idx[colPayload]]
	if !rel.payloadBytea || p.Kind != colText {
		ev.Payload = raw(colPayload)
		return ev, nil
	}
	// bytea's text output is "\x" followed by hex digits.
	if len(p.Data) < 2 || p.Data[0] != '\\' || p.Data[1] != 'x' || len(p.Data)%2 != 0 {
		ev.Payload = raw(colPayload)
		invalid(colPayload, "is not bytea hex output (set bytea_output = 'hex')")
		return ev, nil
	}
	start := len(buf)
	hx := p.Data[2:]
	buf = buf[:start+len(hx)/2]
	if _, err := hex.Decode(buf[start:], hx); err != nil {
		buf = buf[:start]
		ev.Payload = raw(colPayload)
		invalid(colPayload, "bytea hex: "+err.Error())
		return ev, nil
	}
	ev.Payload = buf[start:len(buf):len(buf)]
	return ev, nil
}
