package pbjson

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
)

const orderProto = `syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";

message OrderPlaced {
  string id = 1;
  int64 total_cents = 2;
  Status status = 3;
  repeated Line lines = 4;
  map<string, string> attrs = 5;
  google.protobuf.Timestamp placed_at = 6;
  optional string note = 7;
  message Line {
    string sku = 1;
    int32 qty = 2;
  }
}
enum Status { STATUS_UNSPECIFIED = 0; NEW = 1; PAID = 2; }
message OrderCancelled { string id = 1; string reason = 2; }
`

func mustParse(t testing.TB) *Schema {
	t.Helper()
	s, err := Parse(context.Background(), orderProto, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAppendRoundTrip(t *testing.T) {
	m, err := mustParse(t).Message("")
	if err != nil {
		t.Fatal(err)
	}
	payload := `{"id":"o-1","totalCents":"9007199254740993","status":"PAID","lines":[{"sku":"s1","qty":2}],
		"attrs":{"b":"2","a":"1"},"placed_at":"2026-12-07T12:30:00.123Z","note":""}`
	b, err := m.Append(nil, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	back := dynamicpb.NewMessage(m.desc)
	if err := proto.Unmarshal(b, back); err != nil {
		t.Fatal(err)
	}
	got, _ := protojson.MarshalOptions{UseProtoNames: true}.Marshal(back)
	for _, want := range []string{`"id":"o-1"`, `"total_cents":"9007199254740993"`, `"status":"PAID"`, `"sku":"s1"`, `"qty":2`,
		`"placed_at":"2026-12-07T12:30:00.123Z"`, `"note":""`} {
		if !strings.Contains(strings.ReplaceAll(string(got), " ", ""), want) {
			t.Errorf("decoded %s lacks %s", got, want)
		}
	}
	// Deterministic: the same payload, the same bytes.
	again, _ := m.Append(nil, []byte(payload))
	if string(again) != string(b) {
		t.Errorf("two encodings differ")
	}
}

func TestMessageIndexes(t *testing.T) {
	s := mustParse(t)
	for name, want := range map[string][]int{
		"": {0}, "OrderPlaced": {0}, "shop.v1.OrderPlaced": {0}, "OrderCancelled": {1},
		// Line is OrderPlaced's second nested type: the first is the map
		// field's entry type (AttrsEntry), which Confluent's Java
		// serializer counts too (Descriptor.getNestedTypes).
		"shop.v1.OrderPlaced.Line": {0, 1}, "OrderPlaced.Line": {0, 1},
	} {
		m, err := s.Message(name)
		if err != nil {
			t.Errorf("%q: %v", name, err)
			continue
		}
		if !slices.Equal(m.Indexes, want) {
			t.Errorf("%q: indexes %v, want %v", name, m.Indexes, want)
		}
	}
	if _, err := s.Message("Refund"); err == nil || !strings.Contains(err.Error(), "no message shop.v1.Refund") {
		t.Errorf("unknown message: %v", err)
	}
}

func TestAppendRefuses(t *testing.T) {
	m, _ := mustParse(t).Message("OrderPlaced")
	for payload, want := range map[string]string{
		`{"id":"o","colour":"red"}`:  `unknown field "colour"`,
		`{"status":"LOST"}`:          `invalid value for enum`,
		`{"lines":[{"qty":"many"}]}`: `invalid value for int32`,
		`{"placed_at":"yesterday"}`:  `invalid google.protobuf.Timestamp value "yesterday"`,
		`[1]`:                        `unexpected token`,
	} {
		_, err := m.Append(nil, []byte(payload))
		var pe *Error
		if !errors.As(err, &pe) || pe.Message != "shop.v1.OrderPlaced" || !strings.Contains(pe.Reason, want) {
			t.Errorf("%s: %v, want an *Error containing %q", payload, err, want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for text, want := range map[string]string{
		`syntax = "proto3"; message {`:                                    "protobuf schema:",
		`syntax = "proto3"; enum E { A = 0; }`:                            "declares no message",
		`syntax = "proto3"; import "other.proto"; message M { O o = 1; }`: "other.proto",
	} {
		if _, err := Parse(context.Background(), text, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", text, err, want)
		}
	}
	// A reference resolves the import.
	_, err := Parse(context.Background(), `syntax = "proto3"; import "other.proto"; message M { O o = 1; }`,
		map[string]string{"other.proto": `syntax = "proto3"; message O { string x = 1; }`})
	if err != nil {
		t.Errorf("with the reference: %v", err)
	}
}

func BenchmarkAppend(b *testing.B) {
	m, _ := mustParse(b).Message("")
	payload := []byte(`{"id":"o-1","totalCents":"12345","status":"PAID","lines":[{"sku":"s1","qty":2},{"sku":"s2","qty":1}],"placed_at":"2026-12-07T12:30:00Z"}`)
	var dst []byte
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = m.Append(dst[:0], payload); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzAppend: any input either encodes to bytes that decode, or is
// refused with an *Error; it never panics.
func FuzzAppend(f *testing.F) {
	for _, seed := range []string{`{"id":"o","lines":[{"sku":"a"}],"attrs":{"k":"v"}}`, `{"totalCents":1e3}`, `{"placedAt":"2026-01-01T00:00:00Z"}`, `{`, `null`} {
		f.Add([]byte(seed))
	}
	m, _ := mustParse(f).Message("")
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := m.Append(nil, payload)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("%q: %v is not an *Error", payload, err)
			}
			return
		}
		if err := proto.Unmarshal(b, dynamicpb.NewMessage(m.desc)); err != nil {
			t.Fatalf("%q encoded to %x, which does not decode: %v", payload, b, err)
		}
	})
}
