package record

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/segmentio/kafka-go"
)

// badText is text that is not UTF-8, as a SQL_ASCII database (or a
// bytea-to-text cast) can store it: the first invalid byte is at offset 2.
const badText = "ab\xff\xfe"

// utf8Formats are the encoders every invalid UTF-8 case goes through.
func utf8Formats() []struct {
	name string
	cfg  Config
} {
	return []struct {
		name string
		cfg  Config
	}{
		{"native", Config{}},
		{"debezium", Config{Format: FormatDebezium}},
		{"debezium-expand", Config{Format: FormatDebezium, DebeziumExpandJSON: true}},
		{"cloudevents-binary", Config{Format: FormatCloudEvents, CloudEventsSource: "/src"}},
		{"cloudevents-structured", Config{Format: FormatCloudEvents, CloudEventsSource: "/src", CloudEventsMode: CloudEventsStructured}},
	}
}

// Outcomes of encoding a row with invalid UTF-8 in one field.
const (
	refused     = "refused"     // an *EncodeError naming the field
	passThrough = "passthrough" // the bytes reach Kafka unchanged
	base64ed    = "base64"      // the bytes reach Kafka unchanged, base64 in a JSON event (data_base64)
	rewritten   = "rewritten"   // U+FFFD took the bytes' place: data silently changed
	lost        = "lost"        // the bytes are gone without a trace
)

// utf8Outcome says what became of bad, the field's invalid bytes, in the
// record of an Encode that returned msg, err.
func utf8Outcome(msg kafka.Message, err error, bad []byte) string {
	if err != nil {
		return refused
	}
	var all [][]byte
	all = append(all, msg.Key, msg.Value)
	for _, h := range msg.Headers {
		all = append(all, []byte(h.Key), h.Value)
	}
	for _, b := range all {
		if bytes.Contains(b, bad) {
			return passThrough
		}
	}
	var doc struct {
		DataBase64 string `json:"data_base64"`
	}
	if json.Unmarshal(msg.Value, &doc) == nil && doc.DataBase64 != "" {
		if raw, err := base64.StdEncoding.DecodeString(doc.DataBase64); err == nil && bytes.Contains(raw, bad) {
			return base64ed
		}
	}
	for _, b := range all {
		if bytes.Contains(b, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`)) {
			return rewritten
		}
	}
	return lost
}

// TestInvalidUTF8 (issue 36, row 10): a row with invalid UTF-8 in one
// field, through every format. Before, the formats disagreed: structured
// CloudEvents and every row header replaced the bytes with U+FFFD, the
// expanded Debezium value too, while the key and the other formats'
// headers carried them to Kafka, where Java consumers decode them as
// U+FFFD. The rule now (docs/formats.md#invalid-utf-8): whatever the
// record carries as text (the key, a header name or value, a JSON string)
// must be valid UTF-8, else Encode refuses the row with an *EncodeError
// wrapping an *InvalidUTF8Error that names the field and the byte offset,
// never the bytes, and the relay dead-letters it; a payload the record
// carries as bytes passes unchanged. Nothing is replaced by U+FFFD.
func TestInvalidUTF8(t *testing.T) {
	all := func(o string) map[string]string {
		m := map[string]string{}
		for _, f := range utf8Formats() {
			m[f.name] = o
		}
		return m
	}
	// Payloads are opaque bytes in every format but the expanded Debezium
	// value, which is JSON text written by the relay. A CloudEvent says a
	// payload that is not UTF-8 is application/octet-stream: binary mode
	// carries it as is, structured mode as data_base64.
	opaquePayload := map[string]string{
		"native": passThrough, "debezium": passThrough, "debezium-expand": refused,
		"cloudevents-binary": passThrough, "cloudevents-structured": base64ed,
	}
	cases := []struct {
		field  string // the field named in the error
		offset int    // the offset of its first invalid byte
		code   string // the EncodeError's code
		set    func(*Row)
		want   map[string]string
	}{
		{"event_id", 2, CodeInvalidRow, func(ev *Row) { ev.EventID = badText }, all(refused)},
		{"event_type", 2, CodeInvalidRow, func(ev *Row) { ev.EventType = badText }, all(refused)},
		{"aggregate_type", 2, CodeInvalidRow, func(ev *Row) { ev.AggregateType = badText }, all(refused)},
		{"aggregate_id", 2, CodeInvalidRow, func(ev *Row) { ev.AggregateID = badText }, all(refused)},
		{"aggregate_version", 2, CodeInvalidRow, func(ev *Row) { ev.AggregateVersion = badText }, all(refused)},
		{"schema_version", 2, CodeInvalidRow, func(ev *Row) { ev.SchemaVersion = badText }, all(refused)},
		{`the value of row header "tenant"`, 2, CodeInvalidHeaders,
			func(ev *Row) { ev.Headers = []byte(`{"tenant": "` + badText + `"}`) }, all(refused)},
		{"the name of row header 2", 2, CodeInvalidHeaders,
			func(ev *Row) { ev.Headers = []byte(`{"tenant": "acme", "` + badText + `": "v"}`) }, all(refused)},
		{"payload", 12, CodeInvalidRow, func(ev *Row) { ev.Payload = []byte(`{"note": "` + badText + `"}`) }, opaquePayload},
		{"payload", 7, CodeInvalidRow, func(ev *Row) { ev.Payload = []byte("\x00\x00\x00\x00\x07" + badText) }, opaquePayload},
	}
	for _, c := range cases {
		for _, f := range utf8Formats() {
			ev := formatEvent()
			c.set(ev)
			row := *ev
			payload := bytes.Clone(ev.Payload)
			msg, err := f.cfg.Encode("topic", ev)
			got := utf8Outcome(msg, err, []byte(badText))
			t.Logf("%-34s %-24s %s", c.field, f.name, got)
			if want := c.want[f.name]; got != want {
				t.Errorf("%s in %s: %s, want %s (%v)", c.field, f.name, got, want, err)
				continue
			}
			if err == nil {
				// Passed through: the consumer reads the payload back
				// byte for byte.
				dec, derr := DecodeFormat(msg, f.cfg.Format)
				if derr != nil || !bytes.Equal(dec.Payload, payload) {
					t.Errorf("%s in %s: decoded payload %q, %v; want %q", c.field, f.name, dec.Payload, derr, payload)
				}
				continue
			}
			var ee *EncodeError
			var ue *InvalidUTF8Error
			if !errors.As(err, &ee) || !errors.As(err, &ue) {
				t.Errorf("%s in %s: %T %v, want an *EncodeError wrapping an *InvalidUTF8Error", c.field, f.name, err, err)
				continue
			}
			if ue.Field != c.field || ue.Offset != c.offset || ee.Code != c.code {
				t.Errorf("%s in %s: %s at %d (%s), want %s at %d (%s)", c.field, f.name, ue.Field, ue.Offset, ee.Code, c.field, c.offset, c.code)
			}
			// The reason names the field and the offset, and carries
			// neither the invalid bytes nor the payload: it goes to logs
			// and to the dead letter's reason.
			text := ee.Error()
			wantText := fmt.Sprintf("invalid UTF-8 in %s at byte offset %d", c.field, c.offset)
			if !strings.HasSuffix(text, wantText) {
				t.Errorf("%s in %s: %q, want it to end in %q", c.field, f.name, text, wantText)
			}
			if !utf8.ValidString(text) || strings.Contains(text, badText) || strings.Contains(text, `\xff`) ||
				len(payload) > 0 && strings.Contains(text, string(payload)) {
				t.Errorf("%s in %s: the reason %q carries the field's content", c.field, f.name, text)
			}
			if ee.EventID != row.EventID || ee.AggregateID != row.AggregateID {
				t.Errorf("%s in %s: the error names event %q (aggregate %q)", c.field, f.name, ee.EventID, ee.AggregateID)
			}
		}
	}
}

// TestInvalidUTF8CloudEventsPayload: a JSON payload whose bytes are not
// UTF-8 is not JSON text (RFC 8259 section 8.1): both CloudEvents modes
// give it as application/octet-stream, unchanged, where they used to
// call it application/json and, in structured mode, inline the bytes
// into a JSON event that is then not UTF-8 itself.
func TestInvalidUTF8CloudEventsPayload(t *testing.T) {
	payload := []byte(`{"note": "` + badText + `"}`)
	for _, mode := range []CloudEventsMode{CloudEventsBinary, CloudEventsStructured} {
		ev := formatEvent()
		ev.Payload = payload
		msg, err := Config{Format: FormatCloudEvents, CloudEventsSource: "/src", CloudEventsMode: mode}.Encode("topic", ev)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if mode == CloudEventsBinary {
			var ct string
			for _, h := range msg.Headers {
				if h.Key == HeaderContentType {
					ct = string(h.Value)
				}
			}
			if ct != CloudEventsBinaryContentType || !bytes.Equal(msg.Value, payload) {
				t.Errorf("binary: content-type %q, value %q", ct, msg.Value)
			}
			continue
		}
		if !utf8.Valid(msg.Value) || !json.Valid(msg.Value) {
			t.Fatalf("structured: value %q is not UTF-8 JSON", msg.Value)
		}
		var doc map[string]any
		if err := json.Unmarshal(msg.Value, &doc); err != nil {
			t.Fatal(err)
		}
		if doc["datacontenttype"] != CloudEventsBinaryContentType || doc["data"] != nil {
			t.Errorf("structured: %s", msg.Value)
		}
		raw, err := base64.StdEncoding.DecodeString(doc["data_base64"].(string))
		if err != nil || !bytes.Equal(raw, payload) {
			t.Errorf("structured: data_base64 %q, %v", raw, err)
		}
	}
}

// TestInvalidUTF8RowHeaders: the offset of an invalid byte in a row
// header is in the value as the consumer would read it (after JSON
// unescaping); a lone surrogate escape, which encoding/json also made
// U+FFFD, is refused too; valid escapes and characters are kept.
func TestInvalidUTF8RowHeaders(t *testing.T) {
	for _, c := range []struct {
		headers string
		want    string // the reason's end; "" for accepted
	}{
		{"{\"k\": \"\\u00e9\\n\xff\"}", `invalid UTF-8 in the value of row header "k" at byte offset 3`},
		{"{\"k\": \"\xe9t\xe9\"}", `invalid UTF-8 in the value of row header "k" at byte offset 0`},
		{"{\"k\": \"ok\", \"\\u00e9\xc3\": \"v\"}", `invalid UTF-8 in the name of row header 2 at byte offset 2`},
		{"{\"k\\u00e9\": \"\\u00e9\xed\xa0\x80\"}", `invalid UTF-8 in the value of row header "ké" at byte offset 2`}, // a surrogate in UTF-8 form
		{`{"k": "\ud800"}`, `value of "k": ` + errLoneSurrogate.Error()},
		{`{"k": "\udc00\ud800"}`, `value of "k": ` + errLoneSurrogate.Error()},
		{`{"\ud800": "v"}`, `header name: ` + errLoneSurrogate.Error()},
		{"{\"k\": \"\\ud800\xff\"}", `value of "k": ` + errLoneSurrogate.Error()}, // the first fault
		{"{\"k\": \"\\u00zz\xff\"}", `value of "k": invalid character 'z' in \u hexadecimal character escape`},
		{`{"k\u00e9": "\ud83d\ude00 \u00e9 \"q\"", "x": "caf` + "\u00e9" + `"}`, ""},
	} {
		ev := formatEvent()
		ev.Headers = []byte(c.headers)
		msg, err := Config{}.Encode("topic", ev)
		if c.want == "" {
			if err != nil {
				t.Errorf("%q: %v", c.headers, err)
			} else if got := headerList(msg.Headers[5:]); got != "ké=😀 é \"q\",x=café" {
				t.Errorf("%q: headers %s", c.headers, got)
			}
			continue
		}
		var ee *EncodeError
		if !errors.As(err, &ee) || ee.Code != CodeInvalidHeaders || !strings.HasSuffix(ee.Reason, c.want) || !utf8.ValidString(ee.Reason) {
			t.Errorf("%q: %v, want %s", c.headers, err, c.want)
		}
	}
}

// TestInvalidUTF8Tombstone: a tombstone has the row's key and headers, so
// they must be UTF-8 too.
func TestInvalidUTF8Tombstone(t *testing.T) {
	for _, f := range utf8Formats() {
		cfg := f.cfg
		cfg.TombstoneOnNullPayload = true
		ev := formatEvent()
		ev.Payload, ev.Invalid = nil, InvalidNullPayload
		ev.AggregateID = badText
		_, err := cfg.Encode("topic", ev)
		var ue *InvalidUTF8Error
		if !errors.As(err, &ue) || ue.Field != "aggregate_id" {
			t.Errorf("%s: %v", f.name, err)
		}
	}
}

// TestInvalidUTF8Source: the CloudEvents source is text in every record;
// one that is not UTF-8 is a configuration error.
func TestInvalidUTF8Source(t *testing.T) {
	err := CheckCloudEventsSource("/orders\xff")
	if err == nil || !strings.Contains(err.Error(), "invalid UTF-8 at byte offset 7") {
		t.Fatal(err)
	}
	if _, err := NewEncoder(Config{Format: FormatCloudEvents, CloudEventsSource: "/orders\xff"}); err == nil {
		t.Fatal("NewEncoder accepted the source")
	}
}

func TestInvalidUTF8At(t *testing.T) {
	for s, want := range map[string]int{
		"": -1, "abc": -1, "caf\u00e9 😀": -1, "\xff": 0, "ab\xff\xfe": 2, "\u00e9\xc3": 2, "a\xed\xa0\x80": 1,
		"\xf4\x90\x80\x80": 0, "ok\xc0\xaf": 2, "😀\xf0\x9f\x98": 4,
	} {
		if got := invalidUTF8At(s); got != want {
			t.Errorf("invalidUTF8At(%q) = %d, want %d", s, got, want)
		}
		if got := invalidUTF8AtBytes([]byte(s)); got != want {
			t.Errorf("invalidUTF8AtBytes(%q) = %d, want %d", s, got, want)
		}
	}
}
