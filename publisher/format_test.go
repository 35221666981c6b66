package publisher

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

func formatEvent() *replication.WALEvent {
	return &replication.WALEvent{
		Row: record.Row{EventID: "0190a1b2-0000-7000-8000-000000000001", AggregateType: "order", AggregateID: "o-1", AggregateVersion: "7", EventType: "order.confirmed", SchemaVersion: "2", Payload: []byte(`{"a": 1, "b": null}`), Headers: []byte(`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`), CommitTime: time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.FixedZone("x", 3600))},
	}
}

// encoderPublisher is a Publisher that only builds records (message).
func encoderPublisher(tb testing.TB, rc record.Config, maxBatchBytes int) *Publisher {
	enc, err := record.NewEncoder(rc)
	if err != nil {
		tb.Fatal(err)
	}
	return &Publisher{cfg: config{Config: Config{MaxBatchBytes: maxBatchBytes, Record: rc}}, enc: enc}
}

// TestPublisherTombstones: a NULL payload (a row otherwise valid) is poison
// without TombstoneOnNullPayload, and with it a record with the row's key,
// headers and a null value, in every format; other invalid rows stay
// poison.
func TestPublisherTombstones(t *testing.T) {
	ev := formatEvent()
	ev.Payload, ev.Invalid = nil, replication.InvalidNullPayload
	p := encoderPublisher(t, record.Config{}, 1<<20)
	if _, reason, err := p.message(context.Background(), "t", ev); reason != "invalid_row" || err == nil {
		t.Fatalf("NULL payload without tombstones: %q %v", reason, err)
	}
	for _, f := range record.Formats() {
		for _, mode := range []record.CloudEventsMode{record.CloudEventsBinary, record.CloudEventsStructured} {
			p = encoderPublisher(t, record.Config{Format: f, CloudEventsSource: "/o", CloudEventsMode: mode, TombstoneOnNullPayload: true, DebeziumExpandJSON: true}, 1<<20)
			m, reason, err := p.message(context.Background(), "t", ev)
			if err != nil || m.Value != nil || string(m.Key) != "o-1" || len(m.Headers) < 5 {
				t.Fatalf("%s/%s tombstone: %+v %q %v", f, mode, m, reason, err)
			}
		}
	}
	bad := *ev
	bad.Invalid = `column "aggregate_version" is NULL`
	if _, reason, err := p.message(context.Background(), "t", &bad); reason != "invalid_row" || err == nil {
		t.Fatalf("another NULL with tombstones on: %q %v", reason, err)
	}
	p = encoderPublisher(t, record.Config{Format: record.FormatCloudEvents, CloudEventsSource: "/o"}, 1<<20)
	ev.Invalid, ev.Payload, ev.EventType = "", []byte("{}"), ""
	if _, reason, err := p.message(context.Background(), "t", ev); reason != "invalid_row" || err == nil {
		t.Fatalf("cloudevents without a type: %q %v", reason, err)
	}
}

func TestInvalidRecordConfigFailsPublish(t *testing.T) {
	p := New([]string{"127.0.0.1:1"}, Config{Record: record.Config{Format: record.FormatCloudEvents}})
	defer p.Close()
	if err := p.Publish(t.Context(), formatEvent(), nil); err == nil || !strings.Contains(err.Error(), "source") {
		t.Fatalf("Publish with an invalid record configuration: %v", err)
	}
}

// BenchmarkMessage is the per-event record building of the publisher in
// each format (Publisher.message: checks, dispatch, the record). The
// native format allocates what its encoder does (one header slice).
func BenchmarkMessage(b *testing.B) {
	ev := &replication.WALEvent{
		Row: record.Row{EventID: "0190a1b2-0000-7000-8000-000000000001", AggregateType: "order", AggregateID: "ord-000001", AggregateVersion: "3", EventType: "order.confirmed", SchemaVersion: "1", Payload: []byte(`{"id": 1, "items": [{"sku": "a-1", "qty": 2, "price": 9.99}], "note": null, "total": 19.98}`), Headers: []byte(`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)},
	}
	for _, c := range []struct {
		name string
		rc   record.Config
	}{
		{"native", record.Config{}},
		{"debezium", record.Config{Format: record.FormatDebezium}},
		{"debezium-expand", record.Config{Format: record.FormatDebezium, DebeziumExpandJSON: true}},
		{"cloudevents-binary", record.Config{Format: record.FormatCloudEvents, CloudEventsSource: "/orders"}},
		{"cloudevents-structured", record.Config{Format: record.FormatCloudEvents, CloudEventsSource: "/orders", CloudEventsMode: record.CloudEventsStructured}},
		{"avro", record.Config{Format: record.FormatAvro}},
		{"protobuf", record.Config{Format: record.FormatProtobuf}},
		{"json-schema", record.Config{Format: record.FormatJSONSchema}},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := encoderPublisher(b, c.rc, 1<<20)
			if c.rc.Format.Registry() {
				// The registry's answer is cached by its client: a map
				// lookup here, so the benchmark is the encoding.
				p.cfg.Schemas = benchSchemas(b, c.rc.Format)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := p.message(context.Background(), "outbox.event.order", ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestMessageReasons: the publisher's reasons for events that cannot
// become records, by check in the order they run (the record's checks,
// then the size).
func TestMessageReasons(t *testing.T) {
	p := encoderPublisher(t, record.Config{}, 1<<10)
	for reason, edit := range map[string]func(*replication.WALEvent){
		"invalid_row":        func(ev *replication.WALEvent) { ev.Invalid = `column "event_type" is NULL` },
		"empty_aggregate_id": func(ev *replication.WALEvent) { ev.AggregateID = "" },
		"invalid_headers":    func(ev *replication.WALEvent) { ev.Headers = []byte(`[1]`) },
		"message_too_large":  func(ev *replication.WALEvent) { ev.Payload = make([]byte, 2<<10) },
	} {
		ev := formatEvent()
		edit(ev)
		_, got, err := p.message(context.Background(), "t", ev)
		ee, ok := err.(*EventError)
		if got != reason || !ok || ee.EventID != ev.EventID {
			t.Errorf("%s: got %q, %v", reason, got, err)
		}
	}
	if _, reason, err := p.message(context.Background(), "a b", formatEvent()); reason != "invalid_topic" || err == nil {
		t.Fatalf("invalid topic: %q %v", reason, err)
	}
}

// TestReservedTopics: an event routed to the positions topic, or to any
// topic that begins with "__" (Kafka's internal topics), cannot become a
// record: a forged position would make a relay skip events.
func TestReservedTopics(t *testing.T) {
	p := encoderPublisher(t, record.Config{}, 1<<10)
	p.cfg.ReservedTopics = []string{"positions.custom"}
	for _, topic := range []string{"__outbox_relay_positions", "__consumer_offsets", "__transaction_state", "__x", "positions.custom"} {
		ev := formatEvent()
		_, reason, err := p.message(context.Background(), topic, ev)
		ee, ok := err.(*EventError)
		if reason != ReasonReservedTopic || !ok || ee.EventID != ev.EventID || !strings.Contains(ee.Reason, topic) {
			t.Errorf("%s: got %q, %v", topic, reason, err)
		}
	}
	for _, topic := range []string{"_x", "outbox.event.__x", "positions.custom2"} {
		if _, reason, err := p.message(context.Background(), topic, formatEvent()); err != nil {
			t.Errorf("%s: %q %v", topic, reason, err)
		}
	}
}

// FuzzMessageSize: messageSize bounds kafka-go's own accounting of every
// record the publisher builds, in every format, so a lane batch of at
// most MaxBatchBytes by messageSize is never refused or split by the
// Writer.
func FuzzMessageSize(f *testing.F) {
	f.Add("0190a1b2-0000-7000-8000-000000000001", "order", "o-1", "3", "order.confirmed", "1", []byte(`{"total": 10}`), []byte(`{"trace_id": "t-1"}`))
	f.Add("e", "t", "a", "1", "e", "1", []byte{0, 0xff}, []byte(`{"x": "y"}`))
	f.Add("e", "t", "a", "1", "e", "1", bytes.Repeat([]byte("p"), 300), []byte(`{"`+string(bytes.Repeat([]byte("k"), 200))+`": "v"}`))
	f.Fuzz(func(t *testing.T, eventID, aggType, aggID, aggVersion, eventType, schemaVersion string, payload, headers []byte) {
		ev := &replication.WALEvent{
			Row: record.Row{EventID: eventID, AggregateType: aggType, AggregateID: aggID, AggregateVersion: aggVersion, EventType: eventType, SchemaVersion: schemaVersion, Payload: payload, Headers: headers, CommitTime: time.Unix(1700000000, 123000)},
		}
		for _, rc := range []record.Config{{}, {Format: record.FormatDebezium, DebeziumExpandJSON: true},
			{Format: record.FormatCloudEvents, CloudEventsSource: "/s"},
			{Format: record.FormatCloudEvents, CloudEventsSource: "/s", CloudEventsMode: record.CloudEventsStructured}} {
			msg, err := rc.Encode("topic", &ev.Row)
			if err != nil {
				continue
			}
			if got, kafkaSize := messageSize(&msg), kafkaTotalSize(&msg); got < kafkaSize {
				t.Fatalf("%s: messageSize %d < kafka-go's totalSize %d: a full lane batch would be refused by the Writer", rc.Format, got, kafkaSize)
			}
		}
	})
}

// kafkaTotalSize is kafka-go v0.4.51's Message.totalSize (message.go,
// write.go): the size the Writer compares with BatchBytes before sending
// (MessageTooLargeError) and accumulates per batch.
func kafkaTotalSize(m *kafka.Message) int {
	varint := func(i int64) int {
		u := uint64((i << 1) ^ (i >> 63))
		n := 1
		for ; u >= 0x80; u >>= 7 {
			n++
		}
		return n
	}
	n := 4 + 1 + 1 + (4 + len(m.Key)) + (4 + len(m.Value)) + 8
	n += varint(int64(len(m.Headers)))
	for _, h := range m.Headers {
		n += varint(int64(len(h.Key))) + len(h.Key) + varint(int64(len(h.Value))) + len(h.Value)
	}
	return n
}

// benchSchemas is a registry holding BenchmarkMessage's payload's schema
// in format f, as version 1 of outbox.event.order-value.
func benchSchemas(b *testing.B, f record.Format) *fakeSchemas {
	text := map[record.Format]string{
		record.FormatAvro: `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},
			{"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
				{"name":"sku","type":"string"},{"name":"qty","type":"int"},{"name":"price","type":"double"}]}}},
			{"name":"note","type":["null","string"],"default":null},{"name":"total","type":"double"}]}`,
		record.FormatProtobuf: `syntax = "proto3"; message Order { int64 id = 1; repeated Item items = 2; string note = 3; double total = 4; }
			message Item { string sku = 1; int32 qty = 2; double price = 3; }`,
		record.FormatJSONSchema: `{"type":"object","required":["id","items","total"],"properties":{"id":{"type":"integer"},
			"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer"},"price":{"type":"number"}}}},
			"note":{"type":["null","string"]},"total":{"type":"number"}}}`,
	}[f]
	s, err := record.ParseSchema(context.Background(), 7, f.SchemaType(), text, nil)
	if err != nil {
		b.Fatal(err)
	}
	return &fakeSchemas{schemas: map[record.SchemaRef]*record.Schema{{Subject: "outbox.event.order-value", Version: "1"}: s}}
}
