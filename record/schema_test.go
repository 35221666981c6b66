package record

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/avro"
)

func schemaRow() *Row {
	return &Row{CommitTime: time.Unix(1765110600, 0), EventID: "e-1", AggregateType: "order", AggregateID: "o-1",
		AggregateVersion: "3", EventType: "shop.v1.OrderPlaced", SchemaVersion: "2", Payload: []byte(`{"id":"o-1","qty":2}`)}
}

func TestSchemaRef(t *testing.T) {
	ev := schemaRow()
	for _, c := range []struct {
		cfg  Config
		want SchemaRef
	}{
		{Config{}, SchemaRef{"orders-value", "2"}},
		{Config{SubjectStrategy: SubjectRecord}, SchemaRef{"shop.v1.OrderPlaced", "2"}},
		{Config{SubjectStrategy: SubjectTopicRecord, SchemaVersion: VersionLatest}, SchemaRef{"orders-shop.v1.OrderPlaced", "latest"}},
	} {
		got, err := c.cfg.SchemaRef("orders", ev)
		if err != nil || got != c.want {
			t.Errorf("%+v: %+v, %v; want %+v", c.cfg, got, err, c.want)
		}
	}
	for _, c := range []struct {
		cfg    Config
		mutate func(*Row)
		want   string
	}{
		{Config{SubjectStrategy: SubjectRecord}, func(r *Row) { r.EventType = "" }, "event_type is empty"},
		{Config{}, func(r *Row) { r.SchemaVersion = "v2" }, `schema_version "v2" is not a registry version`},
		{Config{}, func(r *Row) { r.SchemaVersion = "0" }, `schema_version "0"`},
	} {
		ev := schemaRow()
		c.mutate(ev)
		_, err := c.cfg.SchemaRef("orders", ev)
		var ee *EncodeError
		if !errors.As(err, &ee) || ee.Code != CodeSchema || !strings.Contains(ee.Reason, c.want) {
			t.Errorf("%v, want a %s EncodeError with %q", err, CodeSchema, c.want)
		}
	}
}

const avroOrder = `{"type":"record","name":"OrderPlaced","namespace":"shop.v1","fields":[{"name":"id","type":"string"},{"name":"qty","type":"int"}]}`

func TestEncodeRegisteredAvro(t *testing.T) {
	s, err := ParseSchema(context.Background(), 7, "", avroOrder, nil)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := NewEncoder(Config{Format: FormatAvro})
	if err != nil {
		t.Fatal(err)
	}
	ev := schemaRow()
	ref := SchemaRef{"orders-value", "2"}
	msg, err := enc.EncodeRegistered("orders", ev, ref, s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(msg.Value[:5], []byte{0, 0, 0, 0, 7}) {
		t.Fatalf("header %x, want magic 0 and id 7", msg.Value[:5])
	}
	var got map[string]any
	if _, err := avro.MustParse(avroOrder).Decode(msg.Value[5:], &got); err != nil || got["id"] != "o-1" || got["qty"] != int32(2) {
		t.Fatalf("decoded %v, %v", got, err)
	}
	native, _ := Config{}.Encode("orders", ev)
	if string(msg.Key) != "o-1" || len(msg.Headers) != len(native.Headers) || !msg.Time.Equal(native.Time) {
		t.Errorf("key/headers/time differ from the native record's: %+v", msg)
	}

	ev.Payload = []byte(`{"id":"o-1","qty":"two"}`)
	_, err = enc.EncodeRegistered("orders", ev, ref, s)
	var ee *EncodeError
	if !errors.As(err, &ee) || ee.Code != CodeSchema || ee.Reason != "subject orders-value version 2 (schema id 7): field qty: want an integer" {
		t.Errorf("mismatch: %v", err)
	}

	framed := []byte{0, 0, 0, 0, 9, 1, 2, 3}
	ev.Payload = framed
	if msg, err := enc.EncodeRegistered("orders", ev, ref, s); err != nil || !bytes.Equal(msg.Value, framed) {
		t.Errorf("a framed payload: %x, %v; want it unchanged", msg.Value, err)
	}
	if id, ok := FramedSchemaID(framed); !ok || id != 9 {
		t.Errorf("FramedSchemaID = %d, %v", id, ok)
	}
	if _, ok := FramedSchemaID([]byte(`{"a":1}`)); ok {
		t.Error("JSON taken for a framed value")
	}

	tomb, _ := NewEncoder(Config{Format: FormatAvro, TombstoneOnNullPayload: true})
	ev.Payload, ev.Invalid = nil, InvalidNullPayload
	if msg, err := tomb.EncodeRegistered("orders", ev, ref, s); err != nil || msg.Value != nil {
		t.Errorf("tombstone: %x, %v", msg.Value, err)
	}
}

func TestEncodeRegisteredProtobufIndexes(t *testing.T) {
	const proto = `syntax = "proto3"; package shop.v1;
message OrderPlaced { string id = 1; int32 qty = 2; map<string,string> attrs = 3; message Line { string sku = 1; } }
message OrderCancelled { string id = 1; }`
	s, err := ParseSchema(context.Background(), 3, SchemaTypeProtobuf, proto, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg       Config
		eventType string
		header    []byte
	}{
		{Config{Format: FormatProtobuf}, "ignored", []byte{0, 0, 0, 0, 3, 0}},
		{Config{Format: FormatProtobuf, SubjectStrategy: SubjectRecord}, "shop.v1.OrderCancelled", []byte{0, 0, 0, 0, 3, 2, 2}},
		{Config{Format: FormatProtobuf, SubjectStrategy: SubjectRecord}, "shop.v1.OrderPlaced.Line", []byte{0, 0, 0, 0, 3, 4, 0, 2}},
	} {
		enc, _ := NewEncoder(c.cfg)
		ev := schemaRow()
		ev.EventType = c.eventType
		ev.Payload = []byte(`{}`)
		msg, err := enc.EncodeRegistered("orders", ev, SchemaRef{"s", "1"}, s)
		if err != nil || !bytes.HasPrefix(msg.Value, c.header) {
			t.Errorf("%s: %x, %v; want prefix %x", c.eventType, msg.Value, err, c.header)
		}
	}
}

func TestEncodeRegisteredJSONSchema(t *testing.T) {
	s, err := ParseSchema(context.Background(), 11, SchemaTypeJSON, `{"type":"object","required":["id"]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := NewEncoder(Config{Format: FormatJSONSchema})
	ev := schemaRow()
	msg, err := enc.EncodeRegistered("orders", ev, SchemaRef{"orders-value", "2"}, s)
	if err != nil || !bytes.Equal(msg.Value, append([]byte{0, 0, 0, 0, 11}, ev.Payload...)) {
		t.Fatalf("%x, %v", msg.Value, err)
	}
	ev.Payload = []byte(`{"qty":1}`)
	if _, err := enc.EncodeRegistered("orders", ev, SchemaRef{"orders-value", "2"}, s); err == nil || !strings.Contains(err.Error(), "missing property 'id'") {
		t.Errorf("refusal: %v", err)
	}
}

func TestParseSchemaRefuses(t *testing.T) {
	for _, c := range []struct{ typ, text, want string }{
		{"", `{"type":"nope"}`, "schema 1: avro schema"},
		{"XML", `<a/>`, `schema type "XML"`},
		{SchemaTypeProtobuf, `message {`, "protobuf schema"},
		{SchemaTypeJSON, `{"type": 5}`, "json schema"},
	} {
		if _, err := ParseSchema(context.Background(), 1, c.typ, c.text, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want %q", c.typ, c.text, err, c.want)
		}
	}
}

// TestDecodeValueRoundTrip: each registry format's value decodes back to
// the payload's JSON.
func TestDecodeValueRoundTrip(t *testing.T) {
	ctx := context.Background()
	const proto = `syntax = "proto3"; package shop.v1;
message Other { string x = 1; }
message OrderPlaced { string id = 1; int32 qty = 2; message Line { string sku = 1; } }`
	for _, c := range []struct {
		format        Format
		schemaType    string
		text          string
		eventType     string
		payload, want string
		strategy      SubjectStrategy
	}{
		{FormatAvro, "", avroOrder, "", `{"qty":2,"id":"o-1"}`, `{"id":"o-1","qty":2}`, ""},
		{FormatProtobuf, SchemaTypeProtobuf, proto, "shop.v1.OrderPlaced", `{"id":"o-1","qty":2}`, `{"id":"o-1","qty":2}`, SubjectRecord},
		{FormatProtobuf, SchemaTypeProtobuf, proto, "shop.v1.OrderPlaced.Line", `{"sku":"s"}`, `{"sku":"s"}`, SubjectRecord},
		{FormatJSONSchema, SchemaTypeJSON, `{"type":"object"}`, "", `{"qty":2, "id":"o-1"}`, `{"qty":2, "id":"o-1"}`, ""},
	} {
		s, err := ParseSchema(ctx, 5, c.schemaType, c.text, nil)
		if err != nil {
			t.Fatal(err)
		}
		enc, _ := NewEncoder(Config{Format: c.format, SubjectStrategy: c.strategy})
		ev := schemaRow()
		ev.EventType, ev.Payload = c.eventType, []byte(c.payload)
		msg, err := enc.EncodeRegistered("orders", ev, SchemaRef{"s", "1"}, s)
		if err != nil {
			t.Fatalf("%s: %v", c.format, err)
		}
		got, err := s.DecodeValue(msg.Value)
		if err != nil || strings.ReplaceAll(string(got), " ", "") != strings.ReplaceAll(c.want, " ", "") {
			t.Errorf("%s %s: %s, %v; want %s", c.format, c.eventType, got, err, c.want)
		}
	}
	s, _ := ParseSchema(ctx, 5, "", avroOrder, nil)
	for _, bad := range [][]byte{[]byte(`{"a":1}`), {0, 0, 0, 0, 6, 2}, {0, 0, 0, 0, 5, 0xff}} {
		if _, err := s.DecodeValue(bad); err == nil {
			t.Errorf("%x decoded", bad)
		}
	}
}

// FuzzDecodeValue: any value either decodes or is refused with an error;
// none panics or allocates without bound (the message-index list is
// capped).
func FuzzDecodeValue(f *testing.F) {
	ctx := context.Background()
	av, err := ParseSchema(ctx, 5, "", avroOrder, nil)
	if err != nil {
		f.Fatal(err)
	}
	pb, err := ParseSchema(ctx, 5, SchemaTypeProtobuf, `syntax = "proto3"; message M { string id = 1; message N { int32 q = 1; } }`, nil)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][]byte{{0, 0, 0, 0, 5, 6, 'o', '-', '1', 4}, {0, 0, 0, 0, 5, 0, 10, 1, 'x'}, {0, 0, 0, 0, 5, 4, 0, 0, 8, 1}, {0, 0, 0, 0, 5, 0x7f}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		_, _ = av.DecodeValue(value)
		_, _ = pb.DecodeValue(value)
	})
}

func TestSchemaIDOf(t *testing.T) {
	if id, err := SchemaIDOf([]byte{0, 0, 0, 1, 2, 'x'}); err != nil || id != 258 {
		t.Fatalf("%d, %v", id, err)
	}
	for _, v := range [][]byte{nil, {0, 0, 0}, []byte(`{"a":1}`)} {
		if _, err := SchemaIDOf(v); !errors.Is(err, ErrNotFramed) {
			t.Errorf("%q: %v, want ErrNotFramed", v, err)
		}
	}
}

func TestPayloadField(t *testing.T) {
	ctx := context.Background()
	av, err := ParseSchema(ctx, 7, "", avroOrder, nil)
	if err != nil {
		t.Fatal(err)
	}
	js, err := ParseSchema(ctx, 8, SchemaTypeJSON, `{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"price":{"type":"number"}}}}}}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := ParseSchema(ctx, 9, SchemaTypeProtobuf, `syntax = "proto3"; message M { int32 q = 1; repeated N ns = 2; } message N { map<string, int32> m = 1; }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A message with a well-known type is read by protojson, whose
	// account names the member in its text only.
	pbWKT, err := ParseSchema(ctx, 10, SchemaTypeProtobuf, `syntax = "proto3"; import "google/protobuf/timestamp.proto";
		message M { int32 q = 1; google.protobuf.Timestamp at = 2; }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s       *Schema
		payload string
		field   string
	}{
		{av, `{"id":"o-1","qty":"two"}`, "qty"},
		{js, `{"items":[{"price":1},{"price":"x"}]}`, "items/1/price"},
		{pb, `{"q":"x"}`, "q"},
		{pb, `{"ns":[{},{"m":{"k":true}}]}`, `ns[1].m["k"]`},
		{pb, `{"q":1,"r":2}`, "r"},
		{pbWKT, `{"q":"x"}`, ""},
	} {
		_, err := c.s.AppendValue(nil, []byte(c.payload), "")
		field, ok := PayloadField(err)
		if err == nil || !ok || field != c.field {
			t.Errorf("schema %d, %s: PayloadField(%v) = %q, %v; want %q, true", c.s.ID, c.payload, err, field, ok, c.field)
		}
	}
	if _, ok := PayloadField(errors.New("other")); ok {
		t.Error("PayloadField of another error: ok")
	}
}
