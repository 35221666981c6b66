package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"
)

// headerSeeds are headers column values: what PostgreSQL renders for jsonb
// and json, and the malformed shapes the relay must refuse.
var headerSeeds = []string{
	`{"trace_id": "t-1", "tenant": "acme"}`,
	`{}`,
	`null`,
	` {"a":"b"} `,
	`{"a": "b", "a": "c"}`,
	`{"k\u00e9y": "v\n\"q\"", "x": ""}`,
	`{"": "v"}`,
	`{"a": 1}`,
	`{"a": null}`,
	`{"a": {"b": "c"}}`,
	`{"a": ["b"]}`,
	`["a", "b"]`,
	`"a"`,
	`{"a": "b"} {"c": "d"}`,
	`{"a": "b",}`,
	`{"a" "b"}`,
	`{"a": "b"`,
	"{\"a\": \"\xff\"}",
	"",
}

// FuzzParseHeaders: parseHeaders never panics, and it accepts exactly the
// JSON objects whose values are all strings and whose keys are non-empty
// (cross-checked with encoding/json into map[string]any), plus a bare JSON
// null, which means "no headers" like SQL NULL, except where encoding/json
// would change the text: a string that is not valid UTF-8 is an
// *InvalidUTF8Error, one with a lone UTF-16 surrogate escape
// errLoneSurrogate (issue 36, row 10), where encoding/json gives U+FFFD.
// On success the headers are the object's members in order (duplicates
// kept, so the last one is the value encoding/json keeps), and no U+FFFD
// appears that the input did not spell. Header bytes may alias the input
// (by design: the event's buffer outlives its record), so that is not
// checked.
func FuzzParseHeaders(f *testing.F) {
	for _, s := range headerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		raw := bytes.Clone(input)
		hs, err := parseHeaders(raw)
		if !bytes.Equal(input, raw) {
			t.Fatalf("parseHeaders modified its input")
		}

		var v any
		jerr := json.Unmarshal(raw, &v)
		obj, isObj := v.(map[string]any)
		wantOK := jerr == nil && (v == nil || isObj)
		if isObj {
			for k, val := range obj {
				if _, isStr := val.(string); !isStr || k == "" {
					wantOK = false
				}
			}
		}
		// U+FFFDs the input spells, as the character or as an escape.
		spelled := bytes.Count(raw, []byte("\uFFFD")) + bytes.Count(bytes.ToLower(raw), []byte(`\ufffd`))
		surrogateEscape := regexp.MustCompile(`\\u[dD][89a-fA-F]`).Match(raw)
		if err != nil {
			var ue *InvalidUTF8Error
			switch {
			case !wantOK:
			case errors.As(err, &ue):
				// encoding/json would have replaced the bytes.
				if utf8.Valid(raw) || !strings.HasPrefix(ue.Field, "the name of row header ") && !strings.HasPrefix(ue.Field, "the value of row header ") {
					t.Fatalf("parseHeaders(%q) = %v, but it is a UTF-8 JSON object of strings", raw, err)
				}
			case errors.Is(err, errLoneSurrogate):
				if !surrogateEscape {
					t.Fatalf("parseHeaders(%q) = %v, but it has no surrogate escape", raw, err)
				}
			default:
				t.Fatalf("parseHeaders(%q) = %v, but it is a JSON object of strings", raw, err)
			}
			return
		}
		if !wantOK {
			t.Fatalf("parseHeaders(%q) accepted %d headers, but it is not a JSON object of strings (json: %v, %T)", raw, len(hs), jerr, v)
		}
		if !utf8.Valid(raw) {
			t.Fatalf("parseHeaders(%q) accepted text that is not UTF-8", raw)
		}
		if v == nil {
			if len(hs) != 0 {
				t.Fatalf("parseHeaders(%q) = %d headers for a JSON null", raw, len(hs))
			}
			return
		}
		got := 0
		last := map[string]string{}
		for _, h := range hs {
			if h.Key == "" {
				t.Fatalf("parseHeaders(%q) returned an empty header name", raw)
			}
			if !utf8.ValidString(h.Key) || !utf8.Valid(h.Value) {
				t.Fatalf("parseHeaders(%q) returned %q=%q, not UTF-8", raw, h.Key, h.Value)
			}
			got += strings.Count(h.Key, "\uFFFD") + bytes.Count(h.Value, []byte("\uFFFD"))
			last[h.Key] = string(h.Value)
		}
		if got > spelled {
			// encoding/json's replacement of a lone surrogate, accepted.
			t.Fatalf("parseHeaders(%q): %d U+FFFD in the headers, %d in the input: text replaced", raw, got, spelled)
		}
		if len(last) != len(obj) {
			t.Fatalf("parseHeaders(%q): %d distinct keys, encoding/json %d", raw, len(last), len(obj))
		}
		for k, val := range obj {
			if got, ok := last[k]; !ok || got != val.(string) {
				t.Fatalf("parseHeaders(%q): header %q = %q (present %v), encoding/json %q", raw, k, got, ok, val)
			}
		}
	})
}

// FuzzBuildMessage: the native format never panics; it fails exactly when
// a text column is not valid UTF-8 (issue 36, row 10: an *InvalidUTF8Error
// naming the first such column), or the headers do not parse (a header
// that is not UTF-8 included) or repeat a header the format sets (issue
// 36, row 8: a row's "event_id" followed the event's own), with an
// *EncodeError naming the event; otherwise the record is key =
// aggregate_id, value = payload (any bytes), time = commit time, the five
// standard headers first and then the row's, all valid UTF-8.
func FuzzBuildMessage(f *testing.F) {
	f.Add("0190a1b2-0000-7000-8000-000000000001", "order", "o-1", "3", "order.confirmed", "1", []byte(`{"total": 10}`), []byte(`{"trace_id": "t-1"}`))
	f.Add("e", "t", "", "", "", "", []byte{}, []byte{})
	f.Add("e", "t", "a", "1", "e", "1", []byte{0, 0xff}, []byte(`{"event_id": "spoofed"}`))
	f.Add("e", "t", "a", "1", "e", "1", []byte(`{}`), []byte(`{"a": 1}`))
	f.Add("e", "t", "a", "1", "e", "1", bytes.Repeat([]byte("p"), 300), []byte(`{"`+string(bytes.Repeat([]byte("k"), 200))+`": "v"}`))
	f.Add("e", "t\xff", "a", "1", "e", "1", []byte{0xff}, []byte("{\"a\": \"\xfe\"}"))
	f.Add("e", "t", "a", "1", "e", "1", []byte{0xff}, []byte("{\"a\": \"\xfe\"}"))
	f.Fuzz(func(t *testing.T, eventID, aggType, aggID, aggVersion, eventType, schemaVersion string, payload, headers []byte) {
		if aggID == "" {
			aggID = "a" // Encode refuses an empty key before the headers
		}
		ev := &Row{
			EventID: eventID, AggregateType: aggType, AggregateID: aggID, AggregateVersion: aggVersion,
			EventType: eventType, SchemaVersion: schemaVersion, Payload: payload, Headers: headers,
			CommitTime: time.Unix(1700000000, 123000),
		}
		msg, err := Config{}.Encode("topic", ev)
		var rowHeaders []kafka.Header
		var herr error
		if len(headers) > 0 {
			rowHeaders, herr = parseHeaders(headers)
		}
		if herr == nil && slices.ContainsFunc(rowHeaders, func(h kafka.Header) bool { return nativeReserved(h.Key) }) {
			// A row header may not repeat one the format sets: a
			// consumer reading the last event_id would read the row's.
			herr = errors.New("a reserved header name")
		}
		if bad := firstInvalidColumn(ev); bad != nil {
			checkUTF8Refusal(t, err, bad, CodeInvalidRow)
			return
		}
		if herr != nil {
			var ee *EncodeError
			if !errors.As(err, &ee) || ee.EventID != eventID || ee.AggregateID != aggID || ee.Code != CodeInvalidHeaders {
				t.Fatalf("headers %q fail to parse (%v), buildMessage returned %v", headers, herr, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("buildMessage: %v (headers %q parse)", err, headers)
		}
		if msg.Topic != "topic" || string(msg.Key) != aggID || !bytes.Equal(msg.Value, payload) || !msg.Time.Equal(ev.CommitTime) {
			t.Fatalf("message %+v", msg)
		}
		checkRecordText(t, msg)
		std := []kafka.Header{
			{Key: HeaderEventID, Value: []byte(eventID)},
			{Key: HeaderEventType, Value: []byte(eventType)},
			{Key: HeaderSchemaVersion, Value: []byte(schemaVersion)},
			{Key: HeaderAggregateType, Value: []byte(aggType)},
			{Key: HeaderAggregateVersion, Value: []byte(aggVersion)},
		}
		want := append(std, rowHeaders...)
		if len(msg.Headers) != len(want) {
			t.Fatalf("%d headers, want %d", len(msg.Headers), len(want))
		}
		for i := range want {
			if msg.Headers[i].Key != want[i].Key || !bytes.Equal(msg.Headers[i].Value, want[i].Value) {
				t.Fatalf("header %d = %q=%q, want %q=%q", i, msg.Headers[i].Key, msg.Headers[i].Value, want[i].Key, want[i].Value)
			}
		}
	})
}
