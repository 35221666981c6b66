package record

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"
)

// formatConfigs are the relay's record formats, as the relay's encoder is
// configured for each.
var formatConfigs = []struct {
	name string
	rc   Config
	want Format
}{
	{"native", Config{}, FormatNative},
	{"debezium", Config{Format: FormatDebezium}, FormatDebezium},
	{"debezium-expanded", Config{Format: FormatDebezium, DebeziumExpandJSON: true}, FormatDebezium},
	{"cloudevents-binary", Config{Format: FormatCloudEvents, CloudEventsSource: "/orders"}, FormatCloudEvents},
	{"cloudevents-structured", Config{Format: FormatCloudEvents, CloudEventsSource: "/orders",
		CloudEventsMode: CloudEventsStructured}, FormatCloudEvents},
}

func sourceEvent(payload []byte) *Row {
	return &Row{
		EventID: "0190d5a4-7c4e-7d1a-8b3e-0a1b2c3d4e5f", AggregateType: "order", AggregateID: "order-1", AggregateVersion: "3",
		EventType: "order.confirmed", SchemaVersion: "2", Payload: payload,
		Headers:    []byte(`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}`),
		CommitTime: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC),
	}
}

// TestDecodeFormats: the decoder reads the records the encoder writes in
// every format, detected or given, back into the same Event.
func TestDecodeFormats(t *testing.T) {
	for _, payload := range [][]byte{[]byte(`{"total": 10}`), {0, 0, 0, 0, 42, 2, 0xff}} {
		for _, c := range formatConfigs {
			m, err := c.rc.Encode("outbox.event.order", sourceEvent(payload))
			if c.rc.DebeziumExpandJSON && !utf8.Valid(payload) {
				// No JSON form: refused, never mangled (TestInvalidUTF8).
				var ue *InvalidUTF8Error
				if !errors.As(err, &ue) || ue.Field != "payload" {
					t.Fatalf("%s: %v", c.name, err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			m.Partition, m.Offset = 4, 9
			if got := DetectFormat(m); got != c.want {
				t.Fatalf("%s: detected %q", c.name, got)
			}
			for _, f := range []Format{"", c.want} {
				ev, err := DecodeFormat(m, f)
				if err != nil {
					t.Fatalf("%s (%q): %v", c.name, f, err)
				}
				wantPayload := payload
				if c.rc.DebeziumExpandJSON {
					wantPayload = m.Value
				}
				if ev.ID != "0190d5a4-7c4e-7d1a-8b3e-0a1b2c3d4e5f" || ev.AggregateType != "order" || ev.AggregateID != "order-1" ||
					ev.AggregateVersion != 3 || ev.EventType != "order.confirmed" || ev.SchemaVersion != 2 || ev.Format != c.want ||
					!bytes.Equal(ev.Payload, wantPayload) || ev.Partition != 4 || ev.Offset != 9 || !ev.Time.Equal(m.Time) {
					t.Fatalf("%s (%q): decoded %+v", c.name, f, ev)
				}
				// The second payload is framed (schema id 42): SchemaID says so in every format.
				if wantID := uint32(0); payload[0] == 0 && ev.SchemaID != 42 || payload[0] != 0 && ev.SchemaID != wantID || ev.Subject != "" {
					t.Fatalf("%s (%q): SchemaID %d, Subject %q", c.name, f, ev.SchemaID, ev.Subject)
				}
				if len(ev.Headers) != 2 || ev.Headers["tenant"] != "acme" || !strings.HasPrefix(ev.Headers["traceparent"], "00-4bf9") {
					t.Fatalf("%s: headers %v", c.name, ev.Headers)
				}
			}
		}
	}
}

// TestDecodeTombstones: a tombstone (NULL payload) decodes in every
// format, with a nil Payload.
func TestDecodeTombstones(t *testing.T) {
	for _, c := range formatConfigs {
		ev := sourceEvent(nil)
		ev.Invalid = InvalidNullPayload
		rc := c.rc
		rc.TombstoneOnNullPayload = true
		m, err := rc.Encode("t", ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(m)
		if err != nil || got.Payload != nil || got.ID != ev.EventID || got.Format != c.want {
			t.Fatalf("%s: tombstone decoded %+v, %v", c.name, got, err)
		}
	}
}

func TestDecodeCloudEventsExtensions(t *testing.T) {
	ev := sourceEvent([]byte(`{}`))
	ev.Headers = []byte(`{"ce_tenant": "acme"}`)
	m, err := Config{Format: FormatCloudEvents, CloudEventsSource: "/o"}.Encode("t", ev)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(m)
	if err != nil || got.Headers["ce_tenant"] != "acme" || len(got.Headers) != 1 {
		t.Fatalf("%+v %v", got.Headers, err)
	}
	// Structured events of other producers: text data, numbers as versions.
	m = kafka.Message{Key: []byte("k"), Headers: []kafka.Header{{Key: "Content-Type", Value: []byte("application/cloudevents+json")}},
		Value: []byte(`{"specversion":"1.0","id":"0190d5a4-7c4e-7d1a-8b3e-0a1b2c3d4e5f","source":"/x","type":"t","subject":"agg-7",
		"aggregatetype":"a","aggregateversion":5,"schemaversion":1,"datacontenttype":"text/plain","data":"hello","color":"blue"}`)}
	got, err = Decode(m)
	if err != nil || got.AggregateID != "agg-7" || got.AggregateVersion != 5 || string(got.Payload) != "hello" || got.Headers["ce_color"] != "blue" {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestDecodeFormatErrors(t *testing.T) {
	ce := func(h ...string) kafka.Message {
		m := kafka.Message{Key: []byte("k"), Value: []byte(`{}`)}
		for i := 0; i+1 < len(h); i += 2 {
			m.Headers = append(m.Headers, kafka.Header{Key: h[i], Value: []byte(h[i+1])})
		}
		return m
	}
	cases := map[string]kafka.Message{
		"specversion":    ce("ce_specversion", "0.3", "ce_id", "x"),
		"id attribute":   ce("ce_specversion", "1.0", "ce_type", "t"),
		"not a UUID":     ce("ce_specversion", "1.0", "ce_id", "x"),
		"event format":   ce("content-type", "application/cloudevents+avro"),
		"no specversion": ce("content-type", "application/cloudevents+json; charset=UTF-8"),
		"no id header":   ce("id", "", "event_type", "t"),
		"aggregatetype":  ce("ce_specversion", "1.0", "ce_id", "0190d5a4-7c4e-7d1a-8b3e-0a1b2c3d4e5f", "ce_type", "t"),
	}
	for want, m := range cases {
		_, err := Decode(m)
		var de *DecodeError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
	// Forced to a format the record is not in.
	m, _ := Config{}.Encode("t", sourceEvent([]byte(`{}`)))
	if _, err := DecodeFormat(m, FormatCloudEvents); err == nil {
		t.Fatal("a native record decoded as a CloudEvent")
	}
	if _, err := DecodeFormat(m, FormatDebezium); err == nil || !strings.Contains(err.Error(), "no id header") {
		t.Fatalf("a native record decoded as debezium: %v", err)
	}
}

// TestDecodeRegistryFormats: a registry format's record decodes with the
// native headers and its framed value untouched (Decode does no I/O),
// SchemaID the value's id; detected, it is native, with SchemaID set
// all the same. Given the format, a value that is not framed is a
// DecodeError, a tombstone is not.
func TestDecodeRegistryFormats(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		format     Format
		schemaType string
		text       string
	}{
		{FormatAvro, "", avroOrder},
		{FormatProtobuf, SchemaTypeProtobuf, `syntax = "proto3"; package shop.v1; message OrderPlaced { string id = 1; int32 qty = 2; }`},
		{FormatJSONSchema, SchemaTypeJSON, `{"type":"object"}`},
	} {
		s, err := ParseSchema(ctx, 31, c.schemaType, c.text, nil)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := NewEncoder(Config{Format: c.format, TombstoneOnNullPayload: true})
		if err != nil {
			t.Fatal(err)
		}
		row := sourceEvent([]byte(`{"id":"o-1","qty":2}`))
		m, err := enc.EncodeRegistered("orders", row, SchemaRef{"orders-value", "2"}, s)
		if err != nil {
			t.Fatalf("%s: %v", c.format, err)
		}
		if got := DetectFormat(m); got != FormatNative {
			t.Fatalf("%s: detected %q", c.format, got)
		}
		for _, f := range []Format{"", c.format} {
			ev, err := DecodeFormat(m, f)
			wantFormat := f
			if f == "" {
				wantFormat = FormatNative
			}
			if err != nil || ev.SchemaID != 31 || ev.Subject != "" || !bytes.Equal(ev.Payload, m.Value) || ev.Format != wantFormat ||
				ev.ID != row.EventID || ev.AggregateID != "order-1" || ev.SchemaVersion != 2 || ev.Headers["tenant"] != "acme" {
				t.Fatalf("%s (%q): %+v, %v", c.format, f, ev, err)
			}
		}
		plain := m
		plain.Value = []byte(`{"id":"o-1"}`)
		_, err = DecodeFormat(plain, c.format)
		var de *DecodeError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), "value is not framed") || !errors.Is(err, ErrNotFramed) {
			t.Fatalf("%s: unframed value: %v", c.format, err)
		}
		if ev, err := DecodeFormat(plain, FormatNative); err != nil || ev.SchemaID != 0 {
			t.Fatalf("%s: native unframed value: %+v, %v", c.format, ev, err)
		}
		tomb := sourceEvent(nil)
		tomb.Invalid = InvalidNullPayload
		tm, err := enc.EncodeRegistered("orders", tomb, SchemaRef{"orders-value", "2"}, s)
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := DecodeFormat(tm, c.format); err != nil || ev.Payload != nil || ev.SchemaID != 0 {
			t.Fatalf("%s: tombstone %+v, %v", c.format, ev, err)
		}
	}
}

// BenchmarkDecode is the consumer's per-record decoding in each format.
func BenchmarkDecode(b *testing.B) {
	for _, c := range formatConfigs {
		m, err := c.rc.Encode("t", sourceEvent([]byte(`{"total": 10}`)))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func rawRecord(headers ...string) kafka.Message {
	m := kafka.Message{Topic: "t", Partition: 2, Offset: 7, Key: []byte("order-1"), Value: []byte(`{"a":1}`), Time: time.Unix(100, 0)}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Headers = append(m.Headers, kafka.Header{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return m
}

var good = []string{
	"event_id", "0190d5a4-7c4e-7d1a-8b3e-0a1b2c3d4e5f", "event_type", "order.confirmed", "schema_version", "1",
	"aggregate_type", "order", "aggregate_version", "3", "trace_id", "abc",
}

func TestDecode(t *testing.T) {
	ev, err := Decode(rawRecord(append(good, "event_id", "ffffffff-7c4e-7d1a-8b3e-0a1b2c3d4e5f")...))
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != "0190d5a4-7c4e-7d1a-8b3e-0a1b2c3d4e5f" || ev.AggregateID != "order-1" || ev.AggregateVersion != 3 ||
		ev.EventType != "order.confirmed" || ev.SchemaVersion != 1 || ev.AggregateType != "order" ||
		ev.Headers["trace_id"] != "abc" || len(ev.Headers) != 1 || ev.Partition != 2 || ev.Offset != 7 || string(ev.Payload) != `{"a":1}` {
		t.Fatalf("decoded %+v", ev)
	}
}

func TestDecodeErrors(t *testing.T) {
	with := func(key, val string) []string {
		out := append([]string(nil), good...)
		for i := 0; i < len(out); i += 2 {
			if out[i] == key {
				out[i+1] = val
			}
		}
		return out
	}
	cases := map[string]kafka.Message{
		"no event_id":       rawRecord(with("event_id", "")...),
		"not a UUID":        rawRecord(with("event_id", "nope")...),
		"aggregate_version": rawRecord(with("aggregate_version", "x")...),
		"schema_version":    rawRecord(with("schema_version", "")...),
		"event_type":        rawRecord(with("event_type", "")...),
	}
	noKey := rawRecord(good...)
	noKey.Key = nil
	cases["empty key"] = noKey
	for want, m := range cases {
		_, err := Decode(m)
		var de *DecodeError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}
