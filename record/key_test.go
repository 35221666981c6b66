package record

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestDecodeKey: a plain key is the aggregate_id; a framed one (a key
// schema) is decoded in the format's string form, or by its shape when
// the format is not given.
func TestDecodeKey(t *testing.T) {
	avro := []byte{0, 0, 0, 0, 9, 6, 'o', '-', '1'}
	js := append([]byte{0, 0, 0, 0, 9}, `"o-\u00fc"`...)
	for _, c := range []struct {
		key  []byte
		f    Format
		want string
		id   uint32
		err  string
	}{
		{[]byte("o-1"), "", "o-1", 0, ""},
		{[]byte("o-1"), FormatAvro, "o-1", 0, ""},
		{avro, FormatAvro, "o-1", 9, ""},
		{avro, "", "o-1", 9, ""},
		{avro, FormatNative, "o-1", 9, ""},
		{js, FormatJSONSchema, "o-ü", 9, ""},
		{js, "", "o-ü", 9, ""},
		{js, FormatAvro, "", 9, "not a string of the avro key schema"},
		{avro, FormatJSONSchema, "", 9, "not a string of the json-schema key schema"},
		{[]byte{0, 0, 0, 0, 9, 8, 'o'}, FormatAvro, "", 9, "not a string"}, // a length past the end
		{[]byte{0, 0, 1}, "", "", 0, "the key"},
	} {
		agg, id, err := DecodeKey(c.key, c.f)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%x (%q): %q %v, want an error with %q", c.key, c.f, agg, err, c.err)
			}
			continue
		}
		if agg != c.want || id != c.id || err != nil {
			t.Errorf("%x (%q): %q %d %v, want %q %d", c.key, c.f, agg, id, err, c.want, c.id)
		}
	}
}

// TestKeySchemaConfig: a key schema needs a registry format with a
// string form: avro and json-schema, not protobuf.
func TestKeySchemaConfig(t *testing.T) {
	for f, ok := range map[Format]bool{FormatAvro: true, FormatJSONSchema: true, FormatProtobuf: false, FormatNative: false, FormatDebezium: false} {
		c := Config{Format: f, KeySchema: true, CloudEventsSource: "/x"}
		if err := c.Validate(); (err == nil) != ok {
			t.Errorf("%s: %v", f, err)
		}
	}
	s, err := ParseSchema(context.Background(), 3, SchemaTypeProtobuf, `syntax = "proto3"; message K { string id = 1; }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendKey(nil, "o-1"); !errors.Is(err, ErrSchemaInvalid) {
		t.Errorf("a Protobuf key schema: %v", err)
	}
	s, err = ParseSchema(context.Background(), 4, SchemaTypeAvro, `{"type":"string","logicalType":"uuid"}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := s.AppendKey(nil, "o"); err != nil || string(k) != "\x00\x00\x00\x00\x04\x02o" {
		t.Errorf("a uuid string: %q %v", k, err)
	}
}
