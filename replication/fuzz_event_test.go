package replication

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// The row-to-event mapping under fuzz: a Relation message with fuzzed column
// names, order, omissions and type OIDs, then an Insert whose values have
// fuzzed kinds (text, NULL, unchanged TOAST, binary) and bytes. Both are
// well-formed pgoutput, so the only acceptable failures are a *RelationError
// for the relation and a *RowError for the row, and an independent model
// (eventModel) says which one, for which column, and what the event holds.
//
// Inputs:
//   - layout: one byte per relation column. The low nibble picks the name
//     from fuzzNames, the high nibble the type OID: 0 is the name's canonical
//     type, 1..15 index fuzzOIDs. Empty means the migration's table.
//   - vals: per column, a kind byte (low 2 bits: text, NULL, unchanged,
//     binary), a length byte and that many bytes. When vals runs out, the
//     remaining columns get a valid default for their name, so that most
//     inputs reach decodeEvent's success path.
//   - flags: bit 0 drops the last tuple value, bit 1 appends an extra one
//     (column count mismatches).

var fuzzNames = [16]string{
	"event_id", "aggregate_type", "aggregate_id", "aggregate_version",
	"event_type", "schema_version", "payload", "headers",
	"created_at", "tenant", "", "EVENT_ID", "payload ", "headers\xff", "aggregate_id_", "x",
}

var fuzzOIDs = [16]uint32{
	0, // unused: high nibble 0 is the canonical type
	oidBytea, oidInt8, oidInt2, oidInt4, oidText, oidJSON, oidVarchar, oidUUID, oidJSONB,
	1184, 0, 16, 19, 0xffffffff, 701,
}

func canonicalOID(name string) uint32 {
	for role, n := range columnNames {
		if n == name {
			return acceptedTypes[role][0]
		}
	}
	if name == "created_at" {
		return 1184
	}
	return oidText
}

func defaultValue(name string, oid uint32) fuzzValue {
	v := map[string]string{
		"event_id":          "0190a1b2-0000-7000-8000-000000000001",
		"aggregate_type":    "order",
		"aggregate_id":      "o-1",
		"aggregate_version": "3",
		"event_type":        "order.confirmed",
		"schema_version":    "1",
		"payload":           `{"total": 10}`,
		"created_at":        "2026-01-01 00:00:00+00",
	}
	if name == "headers" {
		return fuzzValue{kind: colNull}
	}
	s, ok := v[name]
	if !ok {
		s = "v"
	}
	if name == "payload" && oid == oidBytea {
		s = `\x7b7d00ff`
	}
	return fuzzValue{kind: colText, data: []byte(s)}
}

type fuzzValue struct {
	kind byte
	data []byte
}

var fuzzKinds = [4]byte{colText, colNull, colUnchanged, colBinary}

// buildFuzzRow turns the fuzz inputs into relation columns and tuple values.
func buildFuzzRow(layout, vals []byte, flags uint8) ([]testCol, []fuzzValue) {
	if len(layout) == 0 {
		layout = []byte{0, 1, 2, 3, 4, 5, 6, 7, 8}
	}
	if len(layout) > 24 {
		layout = layout[:24]
	}
	cols := make([]testCol, len(layout))
	for i, b := range layout {
		name := fuzzNames[b&0x0f]
		oid := canonicalOID(name)
		if b>>4 != 0 {
			oid = fuzzOIDs[b>>4]
		}
		cols[i] = testCol{name, oid}
	}
	values := make([]fuzzValue, 0, len(cols)+1)
	for _, c := range cols {
		if len(vals) < 2 {
			values = append(values, defaultValue(c.name, c.oid))
			continue
		}
		kind, n := fuzzKinds[vals[0]&3], int(vals[1])
		vals = vals[2:]
		n = min(n, len(vals))
		v := fuzzValue{kind: kind}
		if kind == colText || kind == colBinary {
			v.data = vals[:n]
		}
		vals = vals[n:]
		values = append(values, v)
	}
	if flags&1 != 0 && len(values) > 0 {
		values = values[:len(values)-1]
	}
	if flags&2 != 0 {
		values = append(values, fuzzValue{kind: colText, data: []byte("extra")})
	}
	return cols, values
}

func insertMessage(relID uint32, values []fuzzValue) []byte {
	e := (&enc{}).u8(msgInsert).u32(relID).u8('N').u16(uint16(len(values)))
	for _, v := range values {
		e.u8(v.kind)
		if v.kind == colText || v.kind == colBinary {
			e.u32(uint32(len(v.data)))
			e.b = append(e.b, v.data...)
		}
	}
	return e.b
}

// relationModel is what newRelation must conclude about cols.
func relationModel(cols []testCol) (pos [numRoles]int, problems []string) {
	for role := range pos {
		pos[role] = -1
		for i, c := range cols {
			if c.name == columnNames[role] {
				pos[role] = i // PostgreSQL forbids duplicates; the last one wins
			}
		}
	}
	for role, p := range pos {
		if p < 0 {
			if role != colHeaders {
				problems = append(problems, fmt.Sprintf("missing column %q", columnNames[role]))
			}
			continue
		}
		ok := false
		for _, oid := range acceptedTypes[role] {
			ok = ok || oid == cols[p].oid
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("column %q has type %s", columnNames[role], typeName(cols[p].oid)))
		}
	}
	return pos, problems
}

// eventModel is what decodeEvent must produce. A row whose shape
// contradicts the relation (column count) stops the stream with a
// *RowError. A value that cannot be mapped (NULL or a non-text kind in a
// required column, a non-text headers value, a bytea payload that is not
// hex output) must be reported, never skipped: either as a *RowError naming
// the column (the stream stops) or, since issue 3, as an event whose
// Invalid names it (the relay dead-letters it). The first failing column
// in decode order is the one reported.
type eventModel struct {
	errColumn string // "" when the row maps; "*" for a column count mismatch
	errReason string // substring of the reason
	eventID   string
	fields    [6]string // text of each required string column, "" otherwise
	payload   []byte    // payload as decoded (raw text when not decodable)
	headers   []byte
}

func modelEvent(cols []testCol, pos [numRoles]int, values []fuzzValue) eventModel {
	var m eventModel
	if len(values) != len(cols) {
		m.errColumn, m.errReason = "*", "tuple has"
		return m
	}
	fail := func(col, reason string) {
		if m.errColumn == "" {
			m.errColumn, m.errReason = col, reason
		}
	}
	check := func(role int) []byte {
		v := values[pos[role]]
		switch v.kind {
		case colText:
			return v.data
		case colNull:
			if role != colHeaders {
				fail(columnNames[role], "is NULL")
			}
		default:
			fail(columnNames[role], "unexpected value kind")
		}
		return nil
	}
	if v := values[pos[colEventID]]; v.kind == colText {
		m.eventID = string(v.data)
	}
	for role := colEventID; role <= colSchemaVersion; role++ {
		m.fields[role] = string(check(role))
	}
	if pos[colHeaders] >= 0 {
		m.headers = check(colHeaders)
	}
	m.payload = check(colPayload)
	if values[pos[colPayload]].kind != colText || cols[pos[colPayload]].oid != oidBytea {
		return m
	}
	text := m.payload
	if !bytes.HasPrefix(text, []byte(`\x`)) {
		fail("payload", "hex")
		return m
	}
	raw, err := hex.DecodeString(string(text[2:]))
	if err != nil {
		fail("payload", "hex")
		return m
	}
	m.payload = raw
	return m
}

func eventFields(ev *WALEvent) [6]string {
	return [6]string{ev.EventID, ev.AggregateType, ev.AggregateID, ev.AggregateVersion, ev.EventType, ev.SchemaVersion}
}

// FuzzDecodeEvent fuzzes the mapping of a relation and an insert tuple to an
// Event (newRelation, decodeEvent through (*Stream).decode). Invariants: no
// panic; a well-formed message fails only with *RelationError / *RowError, and
// exactly when and where the model says (bytea hex errors included); a
// decoded event equals the model, owns its memory (overwriting the receive
// buffer afterwards changes nothing), its slices cannot be appended into one
// another, and its accounted size is bounded by the message size.
func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte{}, []byte{}, uint8(0))
	// Another column order, bytea payload, an extra column.
	f.Add([]byte{9, 0x16, 5, 4, 3, 2, 1, 0}, []byte{}, uint8(0))
	// bytea payload with an odd number and a non-hex digit.
	f.Add([]byte{0, 1, 2, 3, 4, 5, 0x16, 7}, []byte("\x00\x01a\x00\x01t\x00\x01a\x00\x011\x00\x01e\x00\x011\x00\x05\\x0f1"), uint8(0))
	f.Add([]byte{0, 1, 2, 3, 4, 5, 0x16, 7}, []byte("\x00\x01a\x00\x01t\x00\x01a\x00\x011\x00\x01e\x00\x011\x00\x04\\xzz"), uint8(0))
	// NULL, unchanged and binary values in required and optional columns.
	f.Add([]byte{}, []byte("\x00\x02id\x01\x00\x00\x01a"), uint8(0))
	f.Add([]byte{}, []byte("\x00\x02id\x00\x01t\x00\x01a\x00\x011\x00\x01e\x00\x011\x00\x02{}\x02\x00"), uint8(0))
	f.Add([]byte{}, []byte("\x00\x02id\x00\x01t\x00\x01a\x00\x011\x00\x01e\x00\x011\x03\x02{}"), uint8(0))
	f.Add([]byte{}, []byte("\x00\x02id\x00\x01t\x00\x01a\x00\x011\x00\x01e\x00\x011\x00\x02{}\x00\x0c{\"k\": \"v\"}"), uint8(0))
	// Missing, misnamed and mistyped columns; column count mismatches.
	f.Add([]byte{0, 1, 2, 4, 5, 6, 7, 8}, []byte{}, uint8(0))
	f.Add([]byte{0, 1, 2, 0x93, 4, 5, 6, 7}, []byte{}, uint8(0))
	f.Add([]byte{11, 1, 2, 3, 4, 5, 12, 13}, []byte{}, uint8(0))
	f.Add([]byte{}, []byte{}, uint8(1))
	f.Add([]byte{}, []byte{}, uint8(2))
	f.Fuzz(func(t *testing.T, layout, vals []byte, flags uint8) {
		cols, values := buildFuzzRow(layout, vals, flags)
		sink := &recSink{}
		st := newTestStream(sink)
		st.progress = nopProgress{}

		pos, problems := relationModel(cols)
		err := st.decode(1, relationBytes(7, "public", "outbox", cols))
		if len(problems) > 0 {
			var se *RelationError
			if !errors.As(err, &se) {
				t.Fatalf("relation %v: got %v, want a RelationError (%v)", cols, err, problems)
			}
			for _, p := range problems {
				if !strings.Contains(err.Error(), p) {
					t.Fatalf("relation %v: error %q does not say %q", cols, err, p)
				}
			}
			return
		}
		if err != nil {
			t.Fatalf("relation %v: %v", cols, err)
		}
		if err := st.decode(2, beginBytes(100, 9)); err != nil {
			t.Fatal(err)
		}

		msg := insertMessage(7, values)
		want := modelEvent(cols, pos, values)
		err = st.decode(3, msg)
		var re *RowError
		if errors.As(err, &re) {
			if want.errColumn == "" || re.Column != want.errColumn || !strings.Contains(re.Reason, want.errReason) ||
				re.LSN != 3 || (want.errColumn != "*" && re.EventID != want.eventID) {
				t.Fatalf("got %#v, want column %q reason ~%q event_id %q", re, want.errColumn, want.errReason, want.eventID)
			}
			text := err.Error()
			for i := range msg {
				msg[i] = 'X'
			}
			if err.Error() != text {
				t.Fatalf("RowError aliases the message: %q became %q", text, err.Error())
			}
			if len(sink.events) != 0 {
				t.Fatalf("an event was delivered despite %v", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("got %v, want an event or a RowError", err)
		}
		if want.errColumn == "*" {
			t.Fatalf("a %d-value tuple of a %d-column relation decoded without a RowError", len(values), len(cols))
		}
		if len(sink.events) != 1 {
			t.Fatalf("%d events delivered, want 1", len(sink.events))
		}
		ev := sink.events[0]
		switch {
		case want.errColumn == "" && ev.Invalid != "":
			t.Fatalf("valid row marked invalid: %q", ev.Invalid)
		case want.errColumn != "" && (!strings.Contains(ev.Invalid, fmt.Sprintf("%q", want.errColumn)) ||
			!strings.Contains(ev.Invalid, want.errReason)):
			t.Fatalf("event Invalid = %q, want it to name column %q (~%q)", ev.Invalid, want.errColumn, want.errReason)
		}
		if got := eventFields(ev); got != want.fields || !bytes.Equal(ev.Payload, want.payload) ||
			!bytes.Equal(ev.Headers, want.headers) || (ev.Headers == nil) != (want.headers == nil) {
			t.Fatalf("event %q (payload %q headers %q), want %q payload %q headers %q",
				got, ev.Payload, ev.Headers, want.fields, want.payload, want.headers)
		}
		if ev.TxLSN != 100 || ev.Ordinal != 0 {
			t.Fatalf("event position %+v, want the Begin's final LSN 100, ordinal 0", ev.Pos())
		}
		if ev.LSN != pglogrepl.LSN(3) || !ev.CommitTime.Equal(pgEpoch.Add(86400e6*1e3)) {
			t.Fatalf("event position %s time %s", ev.LSN, ev.CommitTime)
		}
		if ev.Size() > len(msg) {
			t.Fatalf("event accounts %d bytes for a %d-byte message", ev.Size(), len(msg))
		}
		if cap(ev.Payload) != len(ev.Payload) || cap(ev.Headers) != len(ev.Headers) {
			t.Fatalf("payload/headers have spare capacity (%d/%d, %d/%d): an append would overwrite a neighbour",
				len(ev.Payload), cap(ev.Payload), len(ev.Headers), cap(ev.Headers))
		}
		// Snapshot with fresh memory, scribble over the receive buffer and
		// the decoder's reused column slice, compare.
		fields := eventFields(ev)
		for i := range fields {
			fields[i] = strings.Clone(fields[i])
		}
		payload, headers := bytes.Clone(ev.Payload), bytes.Clone(ev.Headers)
		for i := range msg {
			msg[i] = 'X'
		}
		for i := range st.cols {
			st.cols[i] = tupleColumn{Kind: colNull}
		}
		if eventFields(ev) != fields || !bytes.Equal(ev.Payload, payload) || !bytes.Equal(ev.Headers, headers) {
			t.Fatalf("event changed when the message buffer was overwritten: %+v", ev)
		}
	})
}
