package replication

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// enc builds pgoutput messages for tests.
type enc struct{ b []byte }

func (e *enc) u8(v byte) *enc    { e.b = append(e.b, v); return e }
func (e *enc) u16(v uint16) *enc { e.b = binary.BigEndian.AppendUint16(e.b, v); return e }
func (e *enc) u32(v uint32) *enc { e.b = binary.BigEndian.AppendUint32(e.b, v); return e }
func (e *enc) u64(v uint64) *enc { e.b = binary.BigEndian.AppendUint64(e.b, v); return e }
func (e *enc) str(s string) *enc { e.b = append(append(e.b, s...), 0); return e }
func (e *enc) text(s string) *enc {
	e.u8(colText).u32(uint32(len(s)))
	e.b = append(e.b, s...)
	return e
}

type testCol struct {
	name string
	oid  uint32
}

var outboxCols = []testCol{
	{"event_id", oidUUID}, {"aggregate_type", oidText}, {"aggregate_id", oidText},
	{"aggregate_version", oidInt8}, {"event_type", oidText}, {"schema_version", oidInt4},
	{"payload", oidJSONB}, {"headers", oidJSONB}, {"created_at", 1184},
}

func relationBytes(id uint32, ns, name string, cols []testCol) []byte {
	e := (&enc{}).u8(msgRelation).u32(id).str(ns).str(name).u8('d').u16(uint16(len(cols)))
	for _, c := range cols {
		e.u8(0).str(c.name).u32(c.oid).u32(0xffffffff)
	}
	return e.b
}

func insertBytes(id uint32, values ...*string) []byte {
	e := (&enc{}).u8(msgInsert).u32(id).u8('N').u16(uint16(len(values)))
	for _, v := range values {
		if v == nil {
			e.u8(colNull)
		} else {
			e.text(*v)
		}
	}
	return e.b
}

func s(v string) *string { return &v }

func beginBytes(final uint64, xid uint32) []byte {
	return (&enc{}).u8(msgBegin).u64(final).u64(86400 * 1e6).u32(xid).b
}

func commitBytes(commit, end uint64) []byte {
	return (&enc{}).u8(msgCommit).u8(0).u64(commit).u64(end).u64(86400 * 1e6).b
}

// recSink records what the stream decodes.
type recSink struct {
	begins  []Begin
	events  []*WALEvent
	commits []Commit
}

func (r *recSink) Begin(b Begin) error       { r.begins = append(r.begins, b); return nil }
func (r *recSink) Insert(ev *WALEvent) error { r.events = append(r.events, ev); return nil }
func (r *recSink) Commit(c Commit) error     { r.commits = append(r.commits, c); return nil }
func newTestStream(sink Sink) *Stream {
	return NewStream(nil, Config{Namespace: "public", Table: "outbox"}, sink, nil)
}

func TestDecodeTransaction(t *testing.T) {
	sink := &recSink{}
	st := newTestStream(sink)
	steps := [][]byte{
		beginBytes(500, 7),
		relationBytes(16384, "public", "outbox", outboxCols),
		insertBytes(16384, s("0190a1b2-0000-7000-8000-000000000001"), s("order"), s("o-1"), s("3"),
			s("order.confirmed"), s("1"), s(`{"total": 10}`), s(`{"trace_id": "t1"}`), s("2026-01-01 00:00:00+00")),
		insertBytes(16384, s("0190a1b2-0000-7000-8000-000000000002"), s("order"), s("o-2"), s("1"),
			s("order.created"), s("2"), s(`{}`), nil, s("2026-01-01 00:00:00+00")),
		commitBytes(490, 500),
	}
	for i, m := range steps {
		if err := st.decode(pglogrepl.LSN(100+i), m); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if len(sink.events) != 2 || len(sink.commits) != 1 || sink.commits[0].EndLSN != 500 {
		t.Fatalf("got %d events, commits %+v", len(sink.events), sink.commits)
	}
	ev := sink.events[0]
	if ev.EventID != "0190a1b2-0000-7000-8000-000000000001" || ev.AggregateID != "o-1" || ev.AggregateVersion != "3" ||
		ev.EventType != "order.confirmed" || ev.SchemaVersion != "1" || string(ev.Payload) != `{"total": 10}` ||
		string(ev.Headers) != `{"trace_id": "t1"}` {
		t.Fatalf("event decoded wrong: %+v", ev)
	}
	if want := pgEpoch.Add(24 * time.Hour); !ev.CommitTime.Equal(want) {
		t.Fatalf("commit time %v, want %v", ev.CommitTime, want)
	}
	if sink.events[1].Headers != nil {
		t.Fatalf("NULL headers decoded as %q", sink.events[1].Headers)
	}
}

func TestColumnsFoundByName(t *testing.T) {
	// ALTER TABLE can reorder nothing, but a user's own table can have any
	// column order and extra columns.
	cols := []testCol{
		{"tenant", oidText}, {"payload", oidBytea}, {"schema_version", oidInt4}, {"event_type", oidText},
		{"aggregate_version", oidInt8}, {"aggregate_id", oidText}, {"aggregate_type", oidText}, {"event_id", oidUUID},
	}
	sink := &recSink{}
	st := newTestStream(sink)
	must(t, st.decode(1, beginBytes(10, 1)))
	must(t, st.decode(2, relationBytes(1, "public", "outbox", cols)))
	must(t, st.decode(3, insertBytes(1, s("acme"), s(`\x00ff41`), s("1"), s("t"), s("9"), s("a-1"), s("acct"), s("id-1"))))
	ev := sink.events[0]
	if ev.AggregateID != "a-1" || ev.AggregateType != "acct" || ev.EventID != "id-1" || string(ev.Payload) != "\x00\xffA" {
		t.Fatalf("decoded %+v payload %q", ev, ev.Payload)
	}
}

func TestRelationResentAfterAlter(t *testing.T) {
	sink := &recSink{}
	st := newTestStream(sink)
	must(t, st.decode(1, relationBytes(1, "public", "outbox", outboxCols)))
	withExtra := append(append([]testCol(nil), outboxCols...), testCol{"tenant", oidText})
	must(t, st.decode(2, relationBytes(1, "public", "outbox", withExtra)))
	must(t, st.decode(3, beginBytes(10, 1)))
	must(t, st.decode(4, insertBytes(1, s("id"), s("t"), s("a"), s("1"), s("e"), s("1"), s("{}"), nil, s("now"), s("acme"))))
	if len(sink.events) != 1 {
		t.Fatal("insert after the re-sent relation was not decoded")
	}
}

func TestMissingColumnStops(t *testing.T) {
	st := newTestStream(&recSink{})
	var cols []testCol
	for _, c := range outboxCols {
		if c.name != "aggregate_version" {
			cols = append(cols, c)
		}
	}
	err := st.decode(1, relationBytes(1, "public", "outbox", cols))
	var se *RelationError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), `missing column "aggregate_version"`) {
		t.Fatalf("got %v", err)
	}
}

func TestNullRequiredColumnMarksEventInvalid(t *testing.T) {
	sink := &recSink{}
	st := newTestStream(sink)
	must(t, st.decode(1, relationBytes(1, "public", "outbox", outboxCols)))
	must(t, st.decode(2, beginBytes(10, 1)))
	must(t, st.decode(3, insertBytes(1, s("id"), s("t"), nil, s("1"), s("e"), s("1"), s("{}"), nil, s("now"))))
	ev := sink.events[0]
	if ev.Invalid != `column "aggregate_id" is NULL` || ev.EventID != "id" || string(ev.Payload) != "{}" {
		t.Fatalf("got %+v", ev)
	}
	if ev.TxLSN != 10 || ev.Ordinal != 0 {
		t.Fatalf("position %v", ev.Pos())
	}
}

func TestTupleShapeMismatchStops(t *testing.T) {
	st := newTestStream(&recSink{})
	must(t, st.decode(1, relationBytes(1, "public", "outbox", outboxCols)))
	must(t, st.decode(2, beginBytes(10, 1)))
	err := st.decode(3, insertBytes(1, s("id"), s("t")))
	var re *RowError
	if !errors.As(err, &re) {
		t.Fatalf("got %v", err)
	}
}

func TestOtherRelationsAndMessagesIgnored(t *testing.T) {
	sink := &recSink{}
	st := newTestStream(sink)
	must(t, st.decode(1, relationBytes(2, "public", "orders", []testCol{{"id", oidText}})))
	must(t, st.decode(2, beginBytes(10, 1)))
	must(t, st.decode(3, insertBytes(2, s("x"))))
	for _, m := range [][]byte{
		(&enc{}).u8(msgType).u32(1).str("public").str("t").b,
		(&enc{}).u8(msgOrigin).u64(1).str("o").b,
		(&enc{}).u8(msgTruncate).u32(1).u8(0).u32(2).b,
	} {
		must(t, st.decode(4, m))
	}
	must(t, st.decode(5, commitBytes(9, 10)))
	if len(sink.events) != 0 || len(sink.commits) != 1 {
		t.Fatalf("events %d commits %d", len(sink.events), len(sink.commits))
	}
}

func TestTruncatedMessagesError(t *testing.T) {
	full := [][]byte{
		beginBytes(1, 1), commitBytes(1, 2),
		relationBytes(1, "public", "outbox", outboxCols),
		insertBytes(1, s("id"), s("t"), s("a"), s("1"), s("e"), s("1"), s("{}"), nil, s("now")),
	}
	for _, m := range full {
		for n := 1; n < len(m); n++ {
			st := newTestStream(&recSink{})
			st.inTx = m[0] != msgBegin
			_ = st.decode(1, relationBytes(1, "public", "outbox", outboxCols))
			if err := st.decode(2, m[:n]); err == nil {
				t.Fatalf("message %q truncated to %d bytes decoded without error", m[0], n)
			}
		}
	}
}

func TestEventOwnsItsMemory(t *testing.T) {
	sink := &recSink{}
	st := newTestStream(sink)
	must(t, st.decode(1, relationBytes(1, "public", "outbox", outboxCols)))
	must(t, st.decode(2, beginBytes(10, 1)))
	msg := insertBytes(1, s("id-1"), s("t"), s("agg"), s("1"), s("e"), s("1"), s(`{"a":1}`), nil, s("now"))
	must(t, st.decode(3, msg))
	for i := range msg {
		msg[i] = 'X' // the receive buffer is reused by pgconn
	}
	ev := sink.events[0]
	if ev.EventID != "id-1" || ev.AggregateID != "agg" || string(ev.Payload) != `{"a":1}` {
		t.Fatalf("event aliases the receive buffer: %+v", ev)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
