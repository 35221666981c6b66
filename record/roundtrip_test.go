package record

import (
	"bytes"
	"errors"
	"maps"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/record/internal/jsonexpand"
)

// roundTripConfigs are every format and mode, with and without
// tombstones and expansion.
func roundTripConfigs() []Config {
	var cs []Config
	for _, tomb := range []bool{false, true} {
		cs = append(cs,
			Config{TombstoneOnNullPayload: tomb},
			Config{Format: FormatNative, TombstoneOnNullPayload: tomb},
			Config{Format: FormatDebezium, TombstoneOnNullPayload: tomb},
			Config{Format: FormatDebezium, DebeziumExpandJSON: true, TombstoneOnNullPayload: tomb},
			Config{Format: FormatCloudEvents, CloudEventsSource: "/orders", TombstoneOnNullPayload: tomb},
			Config{Format: FormatCloudEvents, CloudEventsSource: "urn:example:orders", CloudEventsMode: CloudEventsBinary, TombstoneOnNullPayload: tomb},
			Config{Format: FormatCloudEvents, CloudEventsSource: "/orders", CloudEventsMode: CloudEventsStructured, TombstoneOnNullPayload: tomb},
		)
	}
	return cs
}

// roundTripEvents are outbox rows of every shape a format treats apart:
// JSON objects and other JSON values, binary and text payloads, an empty
// payload, a NULL one, no headers, headers with escapes and non-ASCII
// text, CloudEvents extension headers.
func roundTripEvents() []*Row {
	base := func(n int, payload []byte, headers string) *Row {
		ev := &Row{
			EventID:       "0190d5a4-7c4e-7d1a-8b3e-0a1b2c3d4e" + strconv.Itoa(10+n),
			AggregateType: "order", AggregateID: "order-" + strconv.Itoa(n), AggregateVersion: strconv.Itoa(n + 1),
			EventType: "order.confirmed", SchemaVersion: "2", Payload: payload,
			CommitTime: time.Date(2026, 1, 2, 3, 4, 5, n*1000+7000, time.UTC),
		}
		if headers != "" {
			ev.Headers = []byte(headers)
		}
		return ev
	}
	evs := []*Row{
		base(0, []byte(`{"total": 10, "note": null, "items": [{"sku": "a-1", "qty": 2}]}`), `{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}`),
		base(1, []byte{0, 0, 0, 0, 42, 2, 0xff, '"', '{'}, `{"tenant": "acme"}`),
		base(2, []byte(`[1, "x"]`), ""),
		base(3, []byte(`"just a JSON string"`), `{}`),
		base(4, []byte(`plain text, not JSON`), `null`),
		base(5, []byte{}, `{"k\u00e9y": "v\n\"q\" \u263a", "ce_tenant": "acme"}`),
		base(6, []byte(`{"s": "\ud83d\ude00 \u0001", "n": 12345678901, "f": 1.5e3, "e": [], "o": {"x": null}}`), ""),
	}
	big := base(7, []byte(`{"a": 1}`), `{"region": "eu"}`)
	big.AggregateVersion = "9007199254740993"
	big.AggregateType, big.EventType = "invoice", "invoice.issued"
	evs = append(evs, big)
	null := base(8, nil, `{"tenant": "acme"}`)
	null.Invalid = InvalidNullPayload
	return append(evs, null)
}

// TestRoundTrip encodes every event with every Config and decodes the
// records back, detected and in the given format: every field of the
// event comes back, a NULL payload as a tombstone (nil), an expanded
// Debezium payload as its expansion.
func TestRoundTrip(t *testing.T) {
	for _, c := range roundTripConfigs() {
		want := c.Format
		if want == "" {
			want = FormatNative
		}
		enc, err := NewEncoder(c)
		if err != nil {
			t.Fatal(err)
		}
		for i, ev := range roundTripEvents() {
			name := string(want) + "/" + string(c.CloudEventsMode) + "/" + strconv.FormatBool(c.DebeziumExpandJSON) + "/" +
				strconv.FormatBool(c.TombstoneOnNullPayload) + "/" + strconv.Itoa(i)
			m, err := enc.Encode("outbox.event."+ev.AggregateType, ev)
			if ev.Invalid != "" && !c.TombstoneOnNullPayload {
				if ee, ok := err.(*EncodeError); !ok || ee.Code != CodeInvalidRow {
					t.Fatalf("%s: a NULL payload without tombstones: %v", name, err)
				}
				continue
			}
			if c.DebeziumExpandJSON && !utf8.Valid(ev.Payload) {
				// The expanded value is JSON text: a payload that is not
				// UTF-8 is refused, never mangled (TestInvalidUTF8).
				var ue *InvalidUTF8Error
				if !errors.As(err, &ue) || ue.Field != "payload" {
					t.Fatalf("%s: a payload that is not UTF-8, expanded: %v", name, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			m.Partition, m.Offset = 3, int64(100+i)
			if got := DetectFormat(m); got != want {
				t.Fatalf("%s: detected %q", name, got)
			}
			wantPayload := ev.Payload
			if c.Format == FormatDebezium && c.DebeziumExpandJSON && ev.Payload != nil {
				wantPayload = jsonexpand.Payload(ev.Payload)
			}
			wantHeaders := map[string]string{}
			if len(ev.Headers) > 0 {
				hs, err := parseHeaders(ev.Headers)
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range hs {
					wantHeaders[h.Key] = string(h.Value)
				}
			}
			for _, f := range []Format{"", want} {
				got, err := DecodeFormat(m, f)
				if err != nil {
					t.Fatalf("%s (%q): %v", name, f, err)
				}
				av, _ := strconv.ParseInt(ev.AggregateVersion, 10, 64)
				sv, _ := strconv.Atoi(ev.SchemaVersion)
				if got.ID != ev.EventID || got.AggregateType != ev.AggregateType || got.AggregateID != ev.AggregateID ||
					got.AggregateVersion != av || got.EventType != ev.EventType || got.SchemaVersion != sv ||
					got.Topic != "outbox.event."+ev.AggregateType || got.Partition != 3 || got.Offset != int64(100+i) ||
					!got.Time.Equal(ev.CommitTime) || got.Format != want {
					t.Fatalf("%s (%q): decoded %+v\nfrom %+v", name, f, got, ev)
				}
				if !bytes.Equal(got.Payload, wantPayload) || (got.Payload == nil) != (ev.Payload == nil) {
					t.Fatalf("%s (%q): payload %q (nil %v), want %q (nil %v)", name, f, got.Payload, got.Payload == nil, wantPayload, ev.Payload == nil)
				}
				if len(got.Headers) != len(wantHeaders) || (len(wantHeaders) > 0 && !maps.Equal(got.Headers, wantHeaders)) {
					t.Fatalf("%s (%q): headers %q, want %q", name, f, got.Headers, wantHeaders)
				}
			}
		}
	}
}

// TestRoundTripExpandedValue pins the expansion of one payload, so that
// TestRoundTrip's comparison with jsonexpand.Payload compares with the
// router's output.
func TestRoundTripExpandedValue(t *testing.T) {
	m, err := Config{Format: FormatDebezium, DebeziumExpandJSON: true}.Encode("t", roundTripEvents()[0])
	if err != nil {
		t.Fatal(err)
	}
	ev, err := Decode(m)
	if err != nil || string(ev.Payload) != `{"total":10,"items":[{"sku":"a-1","qty":2}]}` {
		t.Fatalf("%s %v", ev.Payload, err)
	}
}
