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
	// Invalid UTF-8 (issue 36, row 10): in a column, in a JSON payload, in
	// a row header value, after an escape.
	f.Add("e", "t", "ab\xff\xfe", "1", "e", "1", []byte(`{}`), []byte{})
	f.Add("e", "t", "a", "1", "e", "1", []byte("{\"note\": \"ab\xff\xfe\"}"), []byte{})
	f.Add("e", "t", "a", "1", "e", "1", []byte(`{}`), []byte("{\"k\": \"\\u00e9\xff\"}"))
	f.Add("e", "t", "a", "1", "e", "1", []byte(`{}`), []byte(`{"k": "\ud800"}`))
}

// firstInvalidColumn is the *InvalidUTF8Error Encode must return for ev's
// text columns (in the outbox table's order), or nil when they are all
// UTF-8: an independent statement of the rule of checkUTF8.
func firstInvalidColumn(ev *Row) *InvalidUTF8Error {
	for _, c := range []struct{ name, v string }{
		{"event_id", ev.EventID}, {"aggregate_type", ev.AggregateType}, {"aggregate_id", ev.AggregateID},
		{"aggregate_version", ev.AggregateVersion}, {"event_type", ev.EventType}, {"schema_version", ev.SchemaVersion},
	} {
		if i := firstInvalidByte(c.v); i >= 0 {
			return &InvalidUTF8Error{Field: c.name, Offset: i}
		}
	}
	return nil
}

// firstInvalidByte is the offset of the first byte of s that range reads
// as an invalid sequence (a RuneError of one byte), or -1.
func firstInvalidByte(s string) int {
	for i, r := range s {
		if _, n := utf8.DecodeRuneInString(s[i:]); r == utf8.RuneError && n == 1 {
			return i
		}
	}
	return -1
}

// checkUTF8Refusal fails unless err is Encode's refusal of a field that is
// not UTF-8: want's field and offset, with code, and a reason that does
// not carry the field's bytes.
func checkUTF8Refusal(t *testing.T, err error, want *InvalidUTF8Error, code string) {
	t.Helper()
	var ee *EncodeError
	var ue *InvalidUTF8Error
	if !errors.As(err, &ee) || !errors.As(err, &ue) || ee.Code != code || *ue != *want {
		t.Fatalf("Encode returned %v, want %s: %v", err, code, want)
	}
	if !utf8.ValidString(ee.Error()) {
		t.Fatalf("the reason %q is not UTF-8: it carries the field's bytes", ee.Error())
	}
}

// checkRecordText fails unless all the text of msg (key, header names and
// values) is valid UTF-8: what Java consumers decode as strings, which the
// relay never hands them otherwise.
func checkRecordText(t *testing.T, msg kafka.Message) {
	t.Helper()
	if !utf8.Valid(msg.Key) {
		t.Fatalf("key %q is not UTF-8", msg.Key)
	}
	for _, h := range msg.Headers {
		if !utf8.ValidString(h.Key) || !utf8.Valid(h.Value) {
			t.Fatalf("header %q=%q is not UTF-8", h.Key, h.Value)
		}
	}
}

// FuzzDebeziumRecord: the debezium format never panics; it fails exactly
// when a text column, or with expansion the payload, is not valid UTF-8
// (an *InvalidUTF8Error naming the first such field), or the row's headers
// do not parse or repeat one of the record's own headers; otherwise the
// record is key = aggregate_id, value = payload (expanded: valid UTF-8
// JSON, the payload itself as a JSON string when not expanded), time =
// commit time, headers id, event_type, aggregate_type, aggregate_version,
// schema_version, then the row's, all valid UTF-8.
func FuzzDebeziumRecord(f *testing.F) {
	formatSeeds(f)
	f.Fuzz(func(t *testing.T, eventID, aggType, aggID, aggVersion, eventType, schemaVersion string, payload, headers []byte) {
		if aggID == "" {
			aggID = "a" // Encode refuses an empty key before the rest
		}
		ev := &Row{
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
			msg, err := Config{Format: FormatDebezium, DebeziumExpandJSON: expand}.Encode("topic", ev)
			if bad := firstInvalidColumn(ev); bad != nil {
				checkUTF8Refusal(t, err, bad, CodeInvalidRow)
				return
			}
			if expand && !utf8.Valid(payload) {
				checkUTF8Refusal(t, err, &InvalidUTF8Error{Field: "payload", Offset: firstInvalidByte(string(payload))}, CodeInvalidRow)
				continue
			}
			if herr != nil {
				var ee *EncodeError
				if !errors.As(err, &ee) || ee.Code != CodeInvalidHeaders || ee.EventID != eventID {
					t.Fatalf("headers %q refused (%v), Encode returned %v", headers, herr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			checkRecordText(t, msg)
			if msg.Topic != "topic" || string(msg.Key) != aggID || !msg.Time.Equal(ev.CommitTime) {
				t.Fatalf("message %+v", msg)
			}
			if !expand && !bytes.Equal(msg.Value, payload) {
				t.Fatalf("value %q, want the payload %q", msg.Value, payload)
			}
			if expand {
				if !utf8.Valid(msg.Value) || !json.Valid(msg.Value) {
					t.Fatalf("expanded value %q of %q is not UTF-8 JSON", msg.Value, payload)
				}
				var s string
				if json.Unmarshal(msg.Value, &s) == nil && s != string(payload) {
					t.Fatalf("payload %q written as the string %q", payload, s)
				}
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
// a text column is not valid UTF-8 (an *InvalidUTF8Error naming the first
// such column), the type is empty, or the row's headers do not parse or
// replace an attribute; otherwise the binary mode record carries every
// attribute in its ce_ header and the payload as the value, and the
// structured one a JSON event, valid UTF-8, whose attributes and data
// (inline JSON or data_base64) give back the event exactly: nothing is
// ever replaced by U+FFFD. A payload is JSON only when it is UTF-8 too.
func FuzzCloudEvents(f *testing.F) {
	formatSeeds(f)
	f.Fuzz(func(t *testing.T, eventID, aggType, aggID, aggVersion, eventType, schemaVersion string, payload, headers []byte) {
		if aggID == "" {
			aggID = "a" // Encode refuses an empty key before the rest
		}
		ev := &Row{
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
			if bad := firstInvalidColumn(ev); bad != nil {
				checkUTF8Refusal(t, err, bad, CodeInvalidRow)
				return
			}
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
			checkRecordText(t, msg)
			if string(msg.Key) != aggID || !msg.Time.Equal(ev.CommitTime) {
				t.Fatalf("message %+v", msg)
			}
			ct := CloudEventsBinaryContentType
			if json.Valid(payload) && utf8.Valid(payload) {
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
			if !utf8.Valid(msg.Value) {
				t.Fatalf("structured value %q is not UTF-8", msg.Value)
			}
			var doc map[string]json.RawMessage
			if err := json.Unmarshal(msg.Value, &doc); err != nil {
				t.Fatalf("structured value %q: %v", msg.Value, err)
			}
			for k, v := range attrs {
				var s string
				if err := json.Unmarshal(doc[k], &s); err != nil || s != v {
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
