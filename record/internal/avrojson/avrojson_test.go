package avrojson

import (
	"bytes"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/twmb/avro"
)

const orderSchema = `{
  "type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "id", "type": "string"},
    {"name": "qty", "type": "int"},
    {"name": "total", "type": "long"},
    {"name": "ratio", "type": "float"},
    {"name": "weight", "type": "double"},
    {"name": "paid", "type": "boolean"},
    {"name": "note", "type": ["null", "string"], "default": null},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    {"name": "attrs", "type": {"type": "map", "values": "long"}, "default": {}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}, "default": 0},
    {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}, "default": "00000000-0000-0000-0000-000000000000"},
    {"name": "digest", "type": {"type": "fixed", "name": "MD4", "size": 4}, "default": "\u0000\u0000\u0000\u0000"},
    {"name": "source", "type": "string", "default": "web"},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
      {"name": "sku", "type": "string"},
      {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
      {"name": "gift", "type": ["null", "boolean", "Item"], "default": null}
    ]}}, "default": []}
  ]
}`

func mustParse(t testing.TB, text string) (*Schema, *avro.Schema) {
	t.Helper()
	s, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return s, avro.MustParse(text)
}

// decode reads an encoding back with github.com/twmb/avro's decoder
// (checked against Apache Avro's Java library by its own tests), which
// this package does not share.
func decode(t *testing.T, h *avro.Schema, b []byte) map[string]any {
	t.Helper()
	var out map[string]any
	rest, err := h.Decode(b, &out)
	if err != nil || len(rest) != 0 {
		t.Fatalf("cannot decode %x: %v (%d bytes left)", b, err, len(rest))
	}
	return out
}

func TestAppendEveryType(t *testing.T) {
	s, h := mustParse(t, orderSchema)
	payload := `{"id": "o-1", "qty": 3, "total": -9007199254740993, "ratio": 0.5, "weight": 1.25e2,
		"paid": true, "note": {"string": "ring twice"}, "status": "PAID", "tags": ["a", "b"],
		"attrs": {"x": 1, "y": -2}, "price": "12.30", "placed": "2026-12-07T12:30:00.123Z",
		"day": "2026-12-07", "ref": "0b6f3c4e-8d0a-4c47-9a9e-3b7b2f3c1d2e", "digest": "\u0001\u00ff\u0000\u007f",
		"items": [{"sku": "s1", "price": 1.5}, {"sku": "s2", "price": "-0.01", "gift": true},
		          {"sku": "s3", "price": 0, "gift": {"shop.Item": {"sku": "inner", "price": "2"}}}]}`
	b, err := s.Append(nil, []byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, h, b)
	want := map[string]any{
		"id": "o-1", "qty": int32(3), "total": int64(-9007199254740993), "ratio": float32(0.5), "weight": 125.0, "paid": true,
		"note": "ring twice", "status": "PAID", "source": "web",
		"placed": time.Date(2026, 12, 7, 12, 30, 0, 123e6, time.UTC),
		"day":    time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC),
		"ref":    "0b6f3c4e-8d0a-4c47-9a9e-3b7b2f3c1d2e",
	}
	for k, v := range want {
		g := got[k]
		if tm, ok := g.(time.Time); ok {
			g = tm.UTC()
		}
		if g != v {
			t.Errorf("%s = %#v, want %#v", k, g, v)
		}
	}
	if r := got["price"].(*big.Rat); r.FloatString(2) != "12.30" {
		t.Errorf("price = %s", r.FloatString(2))
	}
	if d := got["digest"].([]byte); !bytes.Equal(d, []byte{1, 0xff, 0, 0x7f}) {
		t.Errorf("digest = %x", d)
	}
	items := got["items"].([]any)
	if len(items) != 3 {
		t.Fatalf("items = %v", items)
	}
	for i, want := range []string{"1.50", "-0.01", "0.00"} {
		if r := items[i].(map[string]any)["price"].(*big.Rat); r.FloatString(2) != want {
			t.Errorf("items[%d].price = %s, want %s", i, r.FloatString(2), want)
		}
	}
	if g := items[1].(map[string]any)["gift"]; g != true {
		t.Errorf("items[1].gift = %#v", g)
	}
	if got["tags"].([]any)[1] != "b" || got["attrs"].(map[string]any)["y"] != int64(-2) {
		t.Errorf("tags/attrs = %v %v", got["tags"], got["attrs"])
	}
}

// TestAppendMatchesTheirs: the bytes are the ones github.com/twmb/avro's encoder
// writes for the same values (not compared for arrays and maps: an
// encoder may write their blocks in the other valid form, a negative
// count and a size).
func TestAppendMatchesTheirs(t *testing.T) {
	const schema = `{"type":"record","name":"R","fields":[
		{"name":"a","type":"long"},{"name":"b","type":["null","string"]},
		{"name":"c","type":{"type":"enum","name":"E","symbols":["P","Q"]}},{"name":"d","type":"string","default":"dflt"}]}`
	s, h := mustParse(t, schema)
	mine, err := s.Append(nil, []byte(`{"c":"Q","b":"x","a":-64}`))
	if err != nil {
		t.Fatal(err)
	}
	x := "x"
	theirs, err := h.Encode(map[string]any{"a": int64(-64), "b": &x, "c": "Q", "d": "dflt"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mine, theirs) {
		t.Fatalf("mine %x, theirs %x", mine, theirs)
	}
}

func TestAppendRefuses(t *testing.T) {
	s, _ := mustParse(t, orderSchema)
	base := `"id":"o","qty":1,"total":1,"ratio":1,"weight":1,"paid":false,"status":"NEW","price":"1","placed":0`
	for _, c := range []struct{ payload, path, reason string }{
		{`{` + base[len(`"id":"o",`):] + `}`, "id", "is required by shop.Order and has no default"},
		{`{` + base + `,"colour":"red"}`, "colour", "is not in the schema of shop.Order"},
		{`{` + base + `,"qty":1}`, "qty", "is given twice"},
		{`{` + strings.Replace(base, `"qty":1`, `"qty":2147483648`, 1) + `}`, "qty", "out of range for an int"},
		{`{` + strings.Replace(base, `"qty":1`, `"qty":1.5`, 1) + `}`, "qty", "not a 64-bit integer"},
		{`{` + strings.Replace(base, `"status":"NEW"`, `"status":"LOST"`, 1) + `}`, "status", `"LOST" is not a symbol of enum shop.Status (NEW, PAID, SHIPPED)`},
		{`{` + strings.Replace(base, `"price":"1"`, `"price":"1.005"`, 1) + `}`, "price", "more than 2 fraction digits"},
		{`{` + strings.Replace(base, `"placed":0`, `"placed":"yesterday"`, 1) + `}`, "placed", "not an RFC 3339 timestamp"},
		{`{` + base + `,"items":[{"sku":"a","price":1},{"sku":"b","price":true}]}`, "items[1].price", "want a decimal number"},
		{`{` + base + `,"note":5}`, "note", "matches no branch of the union [null, string]"},
		{`{` + base + `,"digest":"\u0100abc"}`, "digest", "code points 0 to 255"},
		{`{` + base + `,"digest":"ab"}`, "digest", "want 4 bytes for fixed shop.MD4, have 2"},
		{`{` + base + `,"ref":"not-a-uuid"}`, "ref", "is not a UUID"},
		{`[1]`, "", "want a shop.Order object"},
		{`{` + base + `} x`, "", "text after the JSON value"},
	} {
		_, err := s.Append(nil, []byte(c.payload))
		var ae *Error
		if !errors.As(err, &ae) {
			t.Errorf("%s: err = %v, want an *Error", c.payload, err)
			continue
		}
		if ae.Path != c.path || !strings.Contains(ae.Reason, c.reason) {
			t.Errorf("%s:\n got path %q reason %q\nwant path %q reason containing %q", c.payload, ae.Path, ae.Reason, c.path, c.reason)
		}
	}
}

func TestAppendDefaults(t *testing.T) {
	s, h := mustParse(t, orderSchema)
	b, err := s.Append(nil, []byte(`{"id":"o","qty":1,"total":1,"ratio":1,"weight":1,"paid":false,"status":"NEW","price":"1","placed":0}`))
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, h, b)
	if got["note"] != nil || got["source"] != "web" || len(got["tags"].([]any)) != 0 || got["ref"] != "00000000-0000-0000-0000-000000000000" {
		t.Fatalf("defaults: %v", got)
	}
}

func TestTwosComplement(t *testing.T) {
	for in, want := range map[int64]string{0: "00", 1: "01", 127: "7f", 128: "0080", -1: "ff", -128: "80", -129: "ff7f", 255: "00ff", -256: "ff00"} {
		if got := twosComplement(big.NewInt(in)); string(got) != string(mustHex(want)) {
			t.Errorf("%d: %x, want %s", in, got, want)
		}
	}
}

func mustHex(s string) []byte {
	b := make([]byte, len(s)/2)
	for i := range b {
		b[i] = unhex(s[2*i])<<4 | unhex(s[2*i+1])
	}
	return b
}

func unhex(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

func BenchmarkAppend(b *testing.B) {
	s, _ := mustParse(b, orderSchema)
	payload := []byte(`{"id":"o-1","qty":3,"total":12345,"ratio":0.5,"weight":1.5,"paid":true,"note":"x",
		"status":"PAID","tags":["a","b"],"price":"12.30","placed":1765110600123,
		"items":[{"sku":"s1","price":"1.50"},{"sku":"s2","price":"2.25"}]}`)
	var dst []byte
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = s.Append(dst[:0], payload); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDecimalPathsAgree(t *testing.T) {
	for v := int64(-70000); v <= 70000; v += 997 {
		if got, want := appendTwos(nil, v), twosComplement(big.NewInt(v)); !bytes.Equal(got, want) {
			t.Fatalf("%d: appendTwos %x, twosComplement %x", v, got, want)
		}
	}
	for _, v := range []int64{1<<63 - 1, -1 << 63, 1 << 31, -1 << 31, 1<<55 - 1} {
		if got, want := appendTwos(nil, v), twosComplement(big.NewInt(v)); !bytes.Equal(got, want) {
			t.Fatalf("%d: appendTwos %x, twosComplement %x", v, got, want)
		}
	}
	s, h := mustParse(t, `{"type":"record","name":"D","fields":[{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":30,"scale":3}}]}`)
	for in, want := range map[string]string{
		`"1.500"`: "1.500", `"1.5000"`: "1.500", `-7`: "-7.000", `1.2e2`: "120.000", `"123456789012345678901234.5"`: "123456789012345678901234.500",
		`0.001`: "0.001", `"-0.000"`: "0.000",
	} {
		b, err := s.Append(nil, []byte(`{"d":`+in+`}`))
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got := decode(t, h, b)["d"].(*big.Rat).FloatString(3); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
	for _, in := range []string{`"1.0005"`, `1.0001`, `"1/3"`, `"abc"`} {
		if _, err := s.Append(nil, []byte(`{"d":`+in+`}`)); err == nil {
			t.Errorf("%s: accepted", in)
		}
	}
}

// FuzzAppend: any input either encodes to bytes that decode whole, or
// is refused with an *Error or a syntax error; it never panics.
func FuzzAppend(f *testing.F) {
	for _, seed := range []string{
		`{"id":"o","qty":1,"total":1,"ratio":1,"weight":1,"paid":false,"status":"NEW","price":"1","placed":0}`,
		`{"id":"o","qty":1,"total":1,"ratio":1,"weight":1,"paid":false,"status":"NEW","price":"1","placed":0,"note":{"string":"x"},"items":[{"sku":"a","price":"1","gift":{"shop.Item":{"sku":"b","price":2}}}]}`,
		`{"id":"\u00e9","qty":-1,"total":1e2}`, `[]`, `{"a":`, `{"id":"o","id":"p"}`, `"x"`,
	} {
		f.Add([]byte(seed))
	}
	s, h := mustParse(f, orderSchema)
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := s.Append(nil, payload)
		if err != nil {
			return
		}
		var out map[string]any
		if rest, err := h.Decode(b, &out); err != nil || len(rest) != 0 {
			t.Fatalf("encoded %q to %x, which does not decode whole: %v (%d bytes left)", payload, b, err, len(rest))
		}
	})
}
