package replication

import (
	"strings"
	"testing"
)

// BenchmarkDecodeInsert measures decoding one outbox INSERT (~300-byte
// payload) into a WALEvent, the per-row work of the stream.
func BenchmarkDecodeInsert(b *testing.B) {
	sink := &countSink{}
	st := newTestStream(sink)
	if err := st.decode(1, relationBytes(1, "public", "outbox", outboxCols)); err != nil {
		b.Fatal(err)
	}
	if err := st.decode(2, beginBytes(10, 1)); err != nil {
		b.Fatal(err)
	}
	payload := `{"order_id":"ord-000001","customer":"c-42","total":1234,"items":[` + strings.Repeat(`{"sku":"x","q":1},`, 12) + `{"sku":"y","q":2}]}`
	msg := insertBytes(1, s("0190a1b2-0000-7000-8000-000000000001"), s("order"), s("ord-000001"), s("3"),
		s("order.confirmed"), s("1"), s(payload), s(`{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}`), s("2026-01-01 00:00:00+00"))
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := st.decode(3, msg); err != nil {
			b.Fatal(err)
		}
	}
}

type countSink struct{ n int }

func (c *countSink) Begin(Begin) error         { return nil }
func (c *countSink) Insert(ev *WALEvent) error { c.n++; return nil }
func (c *countSink) Commit(Commit) error       { return nil }
