package record

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func formatEvent() *Row {
	return &Row{
		EventID: "0190a1b2-0000-7000-8000-000000000001", AggregateType: "order", AggregateID: "o-1", AggregateVersion: "7",
		EventType: "order.confirmed", SchemaVersion: "2", Payload: []byte(`{"a": 1, "b": null}`),
		Headers:    []byte(`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`),
		CommitTime: time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.FixedZone("x", 3600)),
	}
}

// headerList renders headers as name=value, in order.
func headerList(h []kafka.Header) string {
	var s []string
	for _, x := range h {
		s = append(s, x.Key+"="+string(x.Value))
	}
	return strings.Join(s, ",")
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"": FormatNative, "native": FormatNative, "debezium": FormatDebezium, "cloudevents": FormatCloudEvents,
		"avro": FormatAvro, "protobuf": FormatProtobuf, "json-schema": FormatJSONSchema} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"Native", "Avro", "cloudevent", "json"} {
		if _, err := ParseFormat(bad); err == nil {
			t.Errorf("ParseFormat(%q) accepted", bad)
		}
	}
	if m, err := ParseCloudEventsMode(""); err != nil || m != CloudEventsBinary {
		t.Fatal(m, err)
	}
	if _, err := ParseCloudEventsMode("batch"); err == nil {
		t.Fatal("batch mode accepted")
	}
	for _, ok := range []string{"/orders", "urn:example:orders", "https://example.com/orders", "orders"} {
		if err := CheckCloudEventsSource(ok); err != nil {
			t.Errorf("source %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "%zz"} {
		if err := CheckCloudEventsSource(bad); err == nil {
			t.Errorf("source %q accepted", bad)
		}
	}
	if err := (Config{Format: FormatCloudEvents}).Validate(); err == nil {
		t.Fatal("cloudevents without a source accepted")
	}
	if err := (Config{Format: FormatCloudEvents, CloudEventsSource: "/o", CloudEventsMode: "structured"}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestNativeUnchanged: the dispatch of the native format (and of the zero
// Config) is buildMessage, byte for byte.
func TestNativeUnchanged(t *testing.T) {
	ev := formatEvent()
	want, err := buildMessage("t", ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{{}, {Format: FormatNative, TombstoneOnNullPayload: true}} {
		got, err := c.build("t", ev, false)
		if err != nil {
			t.Fatal(err)
		}
		if got.Topic != want.Topic || !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) ||
			headerList(got.Headers) != headerList(want.Headers) || !got.Time.Equal(want.Time) {
			t.Fatalf("%+v: %+v, want %+v", c, got, want)
		}
	}
}

func TestDebeziumRecord(t *testing.T) {
	ev := formatEvent()
	m, err := buildDebezium("outbox.event.order", ev, false)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Key) != "o-1" || string(m.Value) != `{"a": 1, "b": null}` || !m.Time.Equal(ev.CommitTime) || m.Topic != "outbox.event.order" {
		t.Fatalf("record %+v", m)
	}
	want := "id=0190a1b2-0000-7000-8000-000000000001,event_type=order.confirmed,aggregate_type=order,aggregate_version=7,schema_version=2," +
		"traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if got := headerList(m.Headers); got != want {
		t.Fatalf("headers %s\nwant    %s", got, want)
	}
	m, err = buildDebezium("t", ev, true)
	if err != nil || string(m.Value) != `{"a":1}` {
		t.Fatalf("expanded value %s, %v", m.Value, err)
	}
	for _, h := range []string{`{"id": "x"}`, `{"event_type": "x"}`, `{"schema_version": "9"}`} {
		ev.Headers = []byte(h)
		if _, err := buildDebezium("t", ev, false); err == nil || !strings.Contains(err.Error(), "would repeat") {
			t.Errorf("row headers %s: %v", h, err)
		}
	}
	ev.Headers = []byte(`{"ID": "upper case is another header"}`)
	if _, err := buildDebezium("t", ev, false); err != nil {
		t.Fatal(err)
	}
}

func TestCloudEventsBinary(t *testing.T) {
	ev := formatEvent()
	m, err := buildCloudEvents("outbox.event.order", ev, "/orders", CloudEventsBinary, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "ce_specversion=1.0,ce_id=0190a1b2-0000-7000-8000-000000000001,ce_source=/orders,ce_type=order.confirmed,ce_subject=o-1," +
		"ce_time=2026-03-04T04:06:07.123456Z,content-type=application/json,ce_aggregatetype=order,ce_aggregateversion=7,ce_schemaversion=2," +
		"traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if got := headerList(m.Headers); got != want {
		t.Fatalf("headers %s\nwant    %s", got, want)
	}
	if string(m.Key) != "o-1" || !bytes.Equal(m.Value, ev.Payload) || !m.Time.Equal(ev.CommitTime) {
		t.Fatalf("record %+v", m)
	}
	ev.Payload = []byte{0, 0, 0, 0, 42, 1, 2}
	if m, _ = buildCloudEvents("t", ev, "/orders", CloudEventsBinary, false); !strings.Contains(headerList(m.Headers), "content-type=application/octet-stream") {
		t.Fatalf("binary payload headers %s", headerList(m.Headers))
	}
	// A tombstone: no content-type, null value.
	ev.Payload = nil
	m, err = buildCloudEvents("t", ev, "/orders", CloudEventsBinary, true)
	if err != nil || m.Value != nil || strings.Contains(headerList(m.Headers), "content-type") || !strings.Contains(headerList(m.Headers), "ce_id=") {
		t.Fatalf("tombstone %+v, %v", m, err)
	}
	for _, h := range []string{`{"ce_id": "x"}`, `{"CE_Type": "x"}`, `{"Content-Type": "text/plain"}`, `{"ce_aggregateversion": "1"}`} {
		ev.Headers = []byte(h)
		if _, err := buildCloudEvents("t", ev, "/o", CloudEventsBinary, false); err == nil {
			t.Errorf("row headers %s accepted", h)
		}
	}
	ev.Headers = []byte(`{"ce_tenant": "acme", "traceparent": "x"}`)
	if _, err := buildCloudEvents("t", ev, "/o", CloudEventsBinary, false); err != nil {
		t.Fatal(err)
	}
}

func TestCloudEventsStructured(t *testing.T) {
	ev := formatEvent()
	ev.EventType = "order.\"confirmed\"\n"
	m, err := buildCloudEvents("t", ev, "/orders", CloudEventsStructured, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := headerList(m.Headers); got != "content-type=application/cloudevents+json; charset=UTF-8,traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("headers %s", got)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(m.Value, &doc); err != nil {
		t.Fatalf("%s: %v", m.Value, err)
	}
	str := func(k string) string {
		var s string
		if err := json.Unmarshal(doc[k], &s); err != nil {
			t.Fatalf("%s: %s: %v", k, doc[k], err)
		}
		return s
	}
	for k, want := range map[string]string{
		"specversion": "1.0", "id": ev.EventID, "source": "/orders", "type": ev.EventType, "subject": "o-1",
		"time": "2026-03-04T04:06:07.123456Z", "datacontenttype": "application/json",
		"aggregatetype": "order", "aggregateversion": "7", "schemaversion": "2",
	} {
		if got := str(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if !bytes.Equal(doc["data"], ev.Payload) || len(doc) != 11 {
		t.Fatalf("data %s (%d members)", doc["data"], len(doc))
	}
	ev.Payload = []byte{0, 0, 0, 0, 42, 0xff}
	m, _ = buildCloudEvents("t", ev, "/orders", CloudEventsStructured, false)
	doc = nil
	if err := json.Unmarshal(m.Value, &doc); err != nil {
		t.Fatal(err)
	}
	if raw, _ := base64.StdEncoding.DecodeString(str("data_base64")); !bytes.Equal(raw, ev.Payload) || str("datacontenttype") != "application/octet-stream" || doc["data"] != nil {
		t.Fatalf("binary data: %s", m.Value)
	}
	// A structured tombstone is the binary mode event without data.
	ev.Payload = nil
	m, err = buildCloudEvents("t", ev, "/orders", CloudEventsStructured, true)
	if err != nil || m.Value != nil || !strings.HasPrefix(headerList(m.Headers), "ce_specversion=1.0,") || strings.Contains(headerList(m.Headers), "content-type") {
		t.Fatalf("structured tombstone %+v, %v", m, err)
	}
}

// TestEncodeTombstones: a NULL payload (a row otherwise valid) is an
// invalid row without TombstoneOnNullPayload, and with it a record with
// the row's key, headers and a null value, in every format; other invalid
// rows stay invalid.
func TestEncodeTombstones(t *testing.T) {
	ev := formatEvent()
	ev.Payload, ev.Invalid = nil, InvalidNullPayload
	var ee *EncodeError
	if _, err := (Config{}).Encode("t", ev); !errors.As(err, &ee) || ee.Code != CodeInvalidRow || ee.EventID != ev.EventID {
		t.Fatalf("NULL payload without tombstones: %v", err)
	}
	for _, f := range Formats() {
		for _, mode := range []CloudEventsMode{CloudEventsBinary, CloudEventsStructured} {
			c := Config{Format: f, CloudEventsSource: "/o", CloudEventsMode: mode, TombstoneOnNullPayload: true, DebeziumExpandJSON: true}
			m, err := c.Encode("t", ev)
			if err != nil || m.Value != nil || string(m.Key) != "o-1" || len(m.Headers) < 5 {
				t.Fatalf("%s/%s tombstone: %+v %v", f, mode, m, err)
			}
		}
	}
	bad := *ev
	bad.Invalid = `column "aggregate_version" is NULL`
	if _, err := (Config{TombstoneOnNullPayload: true}).Encode("t", &bad); !errors.As(err, &ee) || ee.Code != CodeInvalidRow {
		t.Fatalf("another NULL with tombstones on: %v", err)
	}
}

// TestEncodeErrors: the checks of Encode, in their order, with the codes
// and reasons the relay's dead letters carry.
func TestEncodeErrors(t *testing.T) {
	ce := Config{Format: FormatCloudEvents, CloudEventsSource: "/o"}
	cases := []struct {
		c     Config
		topic string
		edit  func(*Row)
		want  string
	}{
		{Config{}, "t", func(ev *Row) { ev.Invalid = `column "event_type" is NULL` }, `invalid_row: column "event_type" is NULL`},
		{Config{}, "", func(ev *Row) { ev.Invalid = `column "event_type" is NULL` }, `invalid_row: column "event_type" is NULL`},
		{Config{}, "", func(ev *Row) { ev.AggregateID = "" }, "empty_aggregate_id: aggregate_id is empty"},
		{ce, "a b", func(ev *Row) { ev.EventType = "" }, `invalid_topic: invalid Kafka topic name "a b": only letters, digits, '.', '_' and '-' are allowed`},
		{ce, "t", func(ev *Row) { ev.EventType = "" }, "invalid_row: event_type is empty: a CloudEvent needs a type"},
		{Config{}, "t", func(ev *Row) { ev.Headers = []byte(`[1]`) },
			"invalid_headers: event 0190a1b2-0000-7000-8000-000000000001 (aggregate o-1): headers: not a JSON object"},
		{Config{Format: FormatDebezium}, "t", func(ev *Row) { ev.Headers = []byte(`{"id": "x"}`) },
			`invalid_headers: event 0190a1b2-0000-7000-8000-000000000001 (aggregate o-1): headers: row header "id" would repeat a header of the record format`},
		// The native format too (issue 36, row 8: the record carried two
		// event_id headers, and Java's lastHeader read the forged one).
		{Config{}, "t", func(ev *Row) { ev.Headers = []byte(`{"trace": "t", "event_id": "forged"}`) },
			`invalid_headers: event 0190a1b2-0000-7000-8000-000000000001 (aggregate o-1): headers: row header "event_id" would repeat a header of the record format`},
	}
	for _, c := range cases {
		ev := formatEvent()
		c.edit(ev)
		_, err := c.c.Encode(c.topic, ev)
		var ee *EncodeError
		if !errors.As(err, &ee) || err.Error() != c.want || ee.AggregateID != ev.AggregateID {
			t.Errorf("got %v\nwant %s", err, c.want)
		}
	}
	if _, err := (Config{Format: "xml"}).Encode("t", formatEvent()); err == nil || !strings.Contains(err.Error(), "xml") {
		t.Fatalf("an invalid configuration: %v", err)
	}
	if _, err := (Config{Format: FormatAvro}).Encode("t", formatEvent()); err == nil || !strings.Contains(err.Error(), "EncodeRegistered") {
		t.Fatalf("a registry format without its schema: %v", err)
	}
	if _, err := NewEncoder(Config{Format: FormatCloudEvents}); err == nil || !strings.Contains(err.Error(), "source") {
		t.Fatalf("cloudevents without a source: %v", err)
	}
}

func TestValidTopic(t *testing.T) {
	if ValidTopic("ok.topic_1-x") != nil || ValidTopic("a b") == nil || ValidTopic(strings.Repeat("a", 250)) == nil {
		t.Fatal("topic name rules")
	}
}

func TestBuildMessage(t *testing.T) {
	ev := &Row{
		EventID: "e1", AggregateType: "order", AggregateID: "o-1", AggregateVersion: "7",
		EventType: "order.confirmed", SchemaVersion: "2", Payload: []byte(`{"a":1}`),
		Headers: []byte(`{"trace_id": "t-1", "tenant": "acme"}`), CommitTime: time.Unix(100, 0),
	}
	m, err := buildMessage("outbox.event.order", ev)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Key) != "o-1" || string(m.Value) != `{"a":1}` || !m.Time.Equal(ev.CommitTime) {
		t.Fatalf("message %+v", m)
	}
	want := []string{"event_id=e1", "event_type=order.confirmed", "schema_version=2", "aggregate_type=order",
		"aggregate_version=7", "trace_id=t-1", "tenant=acme"}
	var got []string
	for _, h := range m.Headers {
		got = append(got, h.Key+"="+string(h.Value))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("headers %v, want %v", got, want)
	}
}

func TestHeadersMustBeStringObject(t *testing.T) {
	for _, raw := range []string{`[1]`, `{"a": 1}`, `{"a": {"b": "c"}}`, `"x"`, `{"": "v"}`, `{"a": "b"`} {
		if _, err := parseHeaders([]byte(raw)); err == nil {
			t.Errorf("headers %s accepted", raw)
		}
	}
	if h, err := parseHeaders([]byte(`null`)); err != nil || h != nil {
		t.Fatal("null headers")
	}
}

func BenchmarkBuildMessage(b *testing.B) {
	ev := &Row{
		EventID: "0190a1b2-0000-7000-8000-000000000001", AggregateType: "order", AggregateID: "ord-000001",
		AggregateVersion: "3", EventType: "order.confirmed", SchemaVersion: "1",
		Payload: make([]byte, 300), Headers: []byte(`{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}`),
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := buildMessage("outbox.event.order", ev); err != nil {
			b.Fatal(err)
		}
	}
}
