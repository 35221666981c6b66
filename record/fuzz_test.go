package record

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/replication"
)

// formatSeeds are events for the format fuzz targets: typical rows, empty
// fields, binary payloads, row headers that repeat a format's own.
func formatSeeds(f *testing.F) {
	f.Add("0190a1b2-0000-7000-8000-000000000001", "order", "o-1", "3", "order.confirmed", "1", []byte(`{"total": 10, "note": null}`), []byte(`{"traceparent": "00-x-y-01"}`))
	f.Add("e", "t", "a", "1", "e", "1", []byte{0, 0, 0, 0, 7, 0xff}, []byte(`{"ce_tenant": "acme"}`))
	f.Add("e", "t", "a", "1", "e", "1", []byte(`[1, "x"]`), []byte(`{"id": "spoofed"}`))
	f.Add("e", "t", "a", "1", "e", "1", []byte(`"text"`), []byte(`{"CE_ID": "spoofed", "Content-Type": "x"}`))
	f.Add("e\"\n", "t", "a\x01", "-9", "e\xff", "1", []byte{}, []byte{})
	f.Add("e", "t", "a", "1", "", "1", []byte(`{"a": [{"x": 1}, {"y": 2.5e3}]}`), []byte(`{"a": 1}`))
}

// FuzzDebeziumRecord: buildDebezium never panics; it fails exactly when
// the row's headers do not parse or repeat one of the record's own
// headers; otherwise the record is key = aggregate_id, value = payload
// (expanded: valid JSON), time = commit time, headers id, event_type,
// aggregate_type, aggregate_version, schema_version, then the row's.
func FuzzDebeziumRecord(f *testing.F) {
	formatSeeds(f)
	f.Fuzz(func(t *testing.T, eventID, aggType, aggID, aggVersion, eventType, schemaVersion string, payload, headers []byte) {
		ev := &replication.Event{
			EventID: eventID, AggregateType: aggType, AggregateID: aggID, AggregateVersion: aggVersion,
			EventType: eventType, SchemaVersion: schemaVersion, Payload: payload, Headers: headers,
			CommitTime: time.Unix(1700000000, 123000),
		}
		var rowHeaders []kafka.Header
		var herr error
		if len(headers) > 0 {
			if rowHeaders, herr = parseHeaders(headers); herr == nil {
				for _, h := range rowHeaders {
					if debeziumReserved(h.Key) {
						herr = errors.New("reserved")
					}
				}
			}
		}
		for _, expand := range []bool{false, true} {
			msg, err := buildDebezium("topic", ev, expand)
			if herr != nil {
				if err == nil {
					t.Fatalf("headers %q refused (%v), buildDebezium returned %v", headers, herr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("buildDebezium: %v", err)
			}
			if msg.Topic != "topic" || string(msg.Key) != aggID || !msg.Time.Equal(ev.CommitTime) {
				t.Fatalf("message %+v", msg)
			}
			if !expand && !bytes.Equal(msg.Value, payload) {
				t.Fatalf("value %q, want the payload %q", msg.Value, payload)
			}
			if expand && !json.Valid(msg.Value) {
				t.Fatalf("expanded value %q of %q is not JSON", msg.Value, payload)
			}
			want := append([]kafka.Header{
				{Key: "id", Value: []byte(eventID)},
				{Key: HeaderEventType, Value: []byte(eventType)},
				{Key: HeaderAggregateType, Value: []byte(aggType)},
				{Key: HeaderAggregateVersion, Value: []byte(aggVersion)},
				{Key: HeaderSchemaVersion, Value: []byte(schemaVersion)},
			}, rowHeaders...)
			if headerList(msg.Headers) != headerList(want) {
				t.Fatalf("headers %s, want %s", headerList(msg.Headers), headerList(want))
			}
		}
	})
}

// FuzzCloudEvents: the cloudevents format never panics; it fails exactly when
// the type is empty or the row's headers do not parse or replace an
// attribute; otherwise the binary mode record carries every attribute in
// its ce_ header and the payload as the value, and the structured one a
// JSON event whose attributes and data (inline JSON or data_base64) give
// back the event.
func FuzzCloudEvents(f *testing.F) {
	formatSeeds(f)
	f.Fuzz(func(t *testing.T, eventID, aggType, aggID, aggVersion, eventType, schemaVersion string, payload, headers []byte) {
		if aggID == "" {
			aggID = "a" // Encode refuses an empty key before the rest
		}
		ev := &replication.Event{
			EventID: eventID, AggregateType: aggType, AggregateID: aggID, AggregateVersion: aggVersion,
			EventType: eventType, SchemaVersion: schemaVersion, Payload: payload, Headers: headers,
			CommitTime: time.Unix(1700000000, 123000),
		}
		var rowHeaders []kafka.Header
		var herr error
		if len(headers) > 0 {
			if rowHeaders, herr = parseHeaders(headers); herr == nil {
				for _, h := range rowHeaders {
					if cloudEventsReserved(h.Key) {
						herr = errors.New("reserved")
					}
				}
			}
		}
		if eventType == "" && herr == nil {
			herr = errors.New("no type")
		}
		for _, mode := range []CloudEventsMode{CloudEventsBinary, CloudEventsStructured} {
			msg, err := Config{Format: FormatCloudEvents, CloudEventsSource: "/src", CloudEventsMode: mode}.Encode("topic", ev)
			if herr != nil {
				var ee *EncodeError
				if !errors.As(err, &ee) || ee.EventID != eventID {
					t.Fatalf("%s: %v, Encode returned %v", mode, herr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			if string(msg.Key) != aggID || !msg.Time.Equal(ev.CommitTime) {
				t.Fatalf("message %+v", msg)
			}
			ct := CloudEventsBinaryContentType
			if json.Valid(payload) {
				ct = CloudEventsJSONContentType
			}
			attrs := map[string]string{
				"specversion": "1.0", "id": eventID, "source": "/src", "type": eventType, "subject": aggID,
				"time": "2023-11-14T22:13:20.000123Z", "aggregatetype": aggType, "aggregateversion": aggVersion, "schemaversion": schemaVersion,
			}
			if mode == CloudEventsBinary {
				got := map[string]string{}
				for _, h := range msg.Headers[:len(msg.Headers)-len(rowHeaders)] {
					got[h.Key] = string(h.Value)
				}
				for k, v := range attrs {
					if got["ce_"+k] != v {
						t.Fatalf("ce_%s = %q, want %q", k, got["ce_"+k], v)
					}
				}
				if got[HeaderContentType] != ct || len(got) != len(attrs)+1 || !bytes.Equal(msg.Value, payload) {
					t.Fatalf("binary record %+v", msg)
				}
				continue
			}
			if len(msg.Headers) != 1+len(rowHeaders) || string(msg.Headers[0].Value) != CloudEventsStructuredContentType {
				t.Fatalf("structured headers %s", headerList(msg.Headers))
			}
			var doc map[string]json.RawMessage
			if err := json.Unmarshal(msg.Value, &doc); err != nil {
				t.Fatalf("structured value %q: %v", msg.Value, err)
			}
			for k, v := range attrs {
				var s string
				if err := json.Unmarshal(doc[k], &s); err != nil || (utf8.ValidString(v) && s != v) {
					t.Fatalf("%s = %s, want %q (%v)", k, doc[k], v, err)
				}
			}
			if ct == CloudEventsJSONContentType {
				if !bytes.Equal(doc["data"], bytes.TrimSpace(payload)) && !bytes.Equal(doc["data"], payload) {
					t.Fatalf("data %s, want %s", doc["data"], payload)
				}
			} else {
				var b64 string
				if err := json.Unmarshal(doc["data_base64"], &b64); err != nil {
					t.Fatal(err)
				}
				if raw, err := base64.StdEncoding.DecodeString(b64); err != nil || !bytes.Equal(raw, payload) {
					t.Fatalf("data_base64 %q, want %q", b64, payload)
				}
			}
		}
	})
}
