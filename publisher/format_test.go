package publisher

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/replication"
)

func formatEvent() *replication.Event {
	return &replication.Event{
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
	for in, want := range map[string]Format{"": FormatNative, "native": FormatNative, "debezium": FormatDebezium, "cloudevents": FormatCloudEvents} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"Native", "avro", "cloudevent"} {
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
	if err := (RecordConfig{Format: FormatCloudEvents}).Validate(); err == nil {
		t.Fatal("cloudevents without a source accepted")
	}
	if err := (RecordConfig{Format: FormatCloudEvents, CloudEventsSource: "/o", CloudEventsMode: "structured"}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (RecordConfig{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestNativeUnchanged: the dispatch of the native format (and of the zero
// RecordConfig) is buildMessage, byte for byte.
func TestNativeUnchanged(t *testing.T) {
	ev := formatEvent()
	want, err := buildMessage("t", ev)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []RecordConfig{{}, {Format: FormatNative, TombstoneOnNullPayload: true}} {
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
		var ee *EventError
		if _, err := buildDebezium("t", ev, false); !errors.As(err, &ee) || !strings.Contains(ee.Reason, "would repeat") {
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
	ev.EventType = ""
	if _, err := buildCloudEvents("t", ev, "/o", CloudEventsBinary, false); err == nil {
		t.Fatal("an empty type accepted")
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

// TestPublisherTombstones: a NULL payload (a row otherwise valid) is poison
// without TombstoneOnNullPayload, and with it a record with the row's key,
// headers and a null value, in every format; other invalid rows stay
// poison.
func TestPublisherTombstones(t *testing.T) {
	ev := formatEvent()
	ev.Payload, ev.Invalid = nil, replication.InvalidNullPayload
	p := &Publisher{cfg: Config{MaxBatchBytes: 1 << 20}}
	if _, reason, err := p.message("t", ev); reason != "invalid_row" || err == nil {
		t.Fatalf("NULL payload without tombstones: %q %v", reason, err)
	}
	for _, f := range Formats() {
		for _, mode := range []CloudEventsMode{CloudEventsBinary, CloudEventsStructured} {
			p.cfg.RecordConfig = RecordConfig{Format: f, CloudEventsSource: "/o", CloudEventsMode: mode, TombstoneOnNullPayload: true, DebeziumExpandJSON: true}
			m, reason, err := p.message("t", ev)
			if err != nil || m.Value != nil || string(m.Key) != "o-1" || len(m.Headers) < 5 {
				t.Fatalf("%s/%s tombstone: %+v %q %v", f, mode, m, reason, err)
			}
		}
	}
	bad := *ev
	bad.Invalid = `column "aggregate_version" is NULL`
	if _, reason, err := p.message("t", &bad); reason != "invalid_row" || err == nil {
		t.Fatalf("another NULL with tombstones on: %q %v", reason, err)
	}
	p.cfg.RecordConfig = RecordConfig{Format: FormatCloudEvents, CloudEventsSource: "/o"}
	ev.Invalid, ev.Payload, ev.EventType = "", []byte("{}"), ""
	if _, reason, err := p.message("t", ev); reason != "invalid_row" || err == nil {
		t.Fatalf("cloudevents without a type: %q %v", reason, err)
	}
}

func TestInvalidRecordConfigFailsPublish(t *testing.T) {
	p := New(Config{Brokers: []string{"127.0.0.1:1"}, RecordConfig: RecordConfig{Format: FormatCloudEvents}}, nil, nil)
	defer p.Close()
	if err := p.Publish(t.Context(), formatEvent(), nil); err == nil || !strings.Contains(err.Error(), "source") {
		t.Fatalf("Publish with an invalid record configuration: %v", err)
	}
}

// BenchmarkMessage is the per-event record building of the publisher in
// each format (Publisher.message: checks, dispatch, the record). The
// native format allocates what buildMessage does (one header slice).
func BenchmarkMessage(b *testing.B) {
	ev := &replication.Event{
		EventID: "0190a1b2-0000-7000-8000-000000000001", AggregateType: "order", AggregateID: "ord-000001",
		AggregateVersion: "3", EventType: "order.confirmed", SchemaVersion: "1",
		Payload: []byte(`{"id": 1, "items": [{"sku": "a-1", "qty": 2, "price": 9.99}], "note": null, "total": 19.98}`),
		Headers: []byte(`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`),
	}
	for _, c := range []struct {
		name string
		rc   RecordConfig
	}{
		{"native", RecordConfig{}},
		{"debezium", RecordConfig{Format: FormatDebezium}},
		{"debezium-expand", RecordConfig{Format: FormatDebezium, DebeziumExpandJSON: true}},
		{"cloudevents-binary", RecordConfig{Format: FormatCloudEvents, CloudEventsSource: "/orders"}},
		{"cloudevents-structured", RecordConfig{Format: FormatCloudEvents, CloudEventsSource: "/orders", CloudEventsMode: CloudEventsStructured}},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := &Publisher{cfg: Config{MaxBatchBytes: 1 << 20, RecordConfig: c.rc}}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := p.message("outbox.event.order", ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDebeziumExpandMatchesRouter checks the expansion against the values
// Debezium's router and Connect's JsonConverter wrote for the same
// payloads (testdata/debezium-expand.txt, recorded from the Java classes).
func TestDebeziumExpandMatchesRouter(t *testing.T) {
	raw, err := os.ReadFile("testdata/debezium-expand.txt")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		in, want, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		got := string(expandJSONPayload([]byte(in)))
		if want == "FAIL" {
			// The router stops; the relay writes the text as a JSON string.
			var s string
			if err := json.Unmarshal([]byte(got), &s); err != nil || s != in {
				t.Errorf("%s: %s, want the payload as a JSON string", in, got)
			}
		} else if got != want {
			t.Errorf("%s\n got  %s\n want %s", in, got, want)
		}
		n++
	}
	if n < 20 {
		t.Fatalf("only %d cases", n)
	}
}

func TestJavaDouble(t *testing.T) {
	for f, want := range map[float64]string{
		0: "0.0", 1: "1.0", -1.5: "-1.5", 100: "100.0", 1e7: "1.0E7", 9999999: "9999999.0", 1e-3: "0.001", 9.9e-4: "9.9E-4",
		12345678.5: "1.23456785E7", 1.5e300: "1.5E300", 0.30000000000000004: "0.30000000000000004", 123456.789: "123456.789",
		math.MaxFloat64: "1.7976931348623157E308", math.Inf(1): `"Infinity"`,
	} {
		if got := string(appendJavaDouble(nil, f)); got != want {
			t.Errorf("%v: %s, want %s", f, got, want)
		}
	}
}
