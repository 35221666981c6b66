package jsoncheck

import (
	"errors"
	"strings"
	"testing"
)

const orderSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "id": {"type": "string"},
    "placed": {"type": "string", "format": "date-time"},
    "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
    "customer": {"$ref": "customer.json"}
  },
  "required": ["id"],
  "additionalProperties": false,
  "$defs": {"item": {"type": "object", "properties": {"price": {"type": "number", "minimum": 0}}, "required": ["price"]}}
}`

const customer = `{"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]}`

func mustCompile(t *testing.T) *Schema {
	t.Helper()
	s, err := Compile(orderSchema, map[string]string{"customer.json": customer})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCheck(t *testing.T) {
	s := mustCompile(t)
	if err := s.Check([]byte(`{"id":"o","placed":"2026-12-07T12:30:00Z","items":[{"price":1.5}],"customer":{"email":"a@b"}}`)); err != nil {
		t.Fatal(err)
	}
	for payload, want := range map[string][2]string{
		`{"placed":"2026-12-07T12:30:00Z"}`:             {"", "missing property 'id'"},
		`{"id":"o","items":[{"price":1},{"price":-1}]}`: {"items/1/price", "minimum"},
		`{"id":"o","placed":"yesterday"}`:               {"placed", "date-time"},
		`{"id":"o","colour":"red"}`:                     {"", "additional properties 'colour' not allowed"},
		`{"id":"o","customer":{}}`:                      {"customer", "missing property 'email'"},
		`{"id":`:                                        {"", "not JSON"},
	} {
		err := s.Check([]byte(payload))
		var ce *Error
		if !errors.As(err, &ce) || ce.Path != want[0] || !strings.Contains(ce.Reason, want[1]) {
			t.Errorf("%s: %#v, want path %q, reason with %q", payload, err, want[0], want[1])
		}
	}
}

// TestNothingOutsideIsLoaded: a $ref to a file or a URL is refused when
// the schema compiles; the relay never reads or fetches it.
func TestNothingOutsideIsLoaded(t *testing.T) {
	for _, ref := range []string{"file:///etc/passwd", "http://127.0.0.1:1/schema.json", "other.json"} {
		_, err := Compile(`{"$ref": "`+ref+`"}`, nil)
		if err == nil || !strings.Contains(err.Error(), "the relay loads nothing else") {
			t.Errorf("%s: %v", ref, err)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	s, err := Compile(orderSchema, map[string]string{"customer.json": customer})
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"id":"o","placed":"2026-12-07T12:30:00Z","items":[{"price":1.5},{"price":2}],"customer":{"email":"a@b"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Check(payload); err != nil {
			b.Fatal(err)
		}
	}
}
