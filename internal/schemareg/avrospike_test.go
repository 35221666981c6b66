package schemareg

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/twmb/avro"
)

// A spike for issue 48, not yet the relay's encoder: a row's JSON payload
// encoded into Avro binary with github.com/twmb/avro, the library chosen
// for it (the comparison with hamba/avro is in the report). It
// pins what the encoder will rely on: unions in Avro's JSON mapping
// ({"string": "rush"}) and bare, defaults for missing fields, logical
// types, and errors that name the field.

const spikeSchema = `{"type":"record","name":"Order","namespace":"demo","fields":[
 {"name":"id","type":"string"},
 {"name":"qty","type":"int"},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"amount","type":["null","long","string"]},
 {"name":"placed_at","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]},"default":"NEW"}
]}`

// spikeWant: "o-1", 3, union branch 1 "rush", union branch 1 1250,
// 1700000000000 ms, decimal 12.50 (unscaled 1250 = 0x04e2), PAID. Checked
// by decoding it with hamba/avro, an independent implementation.
var spikeWant = []byte{0x06, 'o', '-', '1', 0x06, 0x02, 0x08, 'r', 'u', 's', 'h', 0x02, 0xc4, 0x13,
	0x80, 0xa0, 0xab, 0xfe, 0xf9, 0x62, 0x04, 0x04, 0xe2, 0x02}

func TestSpikeAvroFromJSON(t *testing.T) {
	s := avro.MustParse(spikeSchema)
	// Avro's JSON encoding (what Java's JsonDecoder and Confluent's console
	// producer read): tagged unions, bytes as a string of code points.
	avroJSON := []string{
		`{"id":"o-1","qty":3,"note":{"string":"rush"},"amount":{"long":1250},"placed_at":1700000000000,"price":"\u0004\u00e2","status":"PAID"}`,
		`{"id":"o-1","qty":3,"note":"rush","amount":1250,"placed_at":1700000000000,"price":"\u0004\u00e2","status":"PAID"}`,
	}
	for _, p := range avroJSON {
		var native any
		if err := s.DecodeJSON([]byte(p), &native); err != nil {
			t.Fatalf("DecodeJSON %s: %v", p, err)
		}
		got, err := s.AppendEncode(nil, native)
		if err != nil || !bytes.Equal(got, spikeWant) {
			t.Errorf("Avro JSON %s:\n got % x %v\nwant % x", p, got, err, spikeWant)
		}
	}
	// What rows tend to hold (RFC 3339 time, decimal as text): not Avro
	// JSON, but Encode takes it from encoding/json's values.
	var native any
	d := json.NewDecoder(strings.NewReader(`{"id":"o-1","qty":3,"note":"rush","amount":1250,"placed_at":"2023-11-14T22:13:20Z","price":"12.50","status":"PAID"}`))
	d.UseNumber()
	if err := d.Decode(&native); err != nil {
		t.Fatal(err)
	}
	if got, err := s.AppendEncode(nil, native); err != nil || !bytes.Equal(got, spikeWant) {
		t.Errorf("row JSON: got % x %v", got, err)
	}
	// a missing field with a default takes it: status NEW is the last byte 0
	var def any
	if err := s.DecodeJSON([]byte(`{"id":"o-1","qty":3,"note":"rush","amount":1250,"placed_at":1700000000000,"price":"\u0004\u00e2"}`), &def); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.AppendEncode(nil, def); !bytes.Equal(got[:len(got)-1], spikeWant[:len(spikeWant)-1]) || got[len(got)-1] != 0 {
		t.Errorf("default: got % x", got)
	}
	// errors name the offending field
	for p, field := range map[string]string{
		`{"id":"o-1","qty":"three","placed_at":1,"price":""}`:            "qty",
		`{"id":"o-1","qty":3,"placed_at":1,"price":"","note":{"int":1}}`: "note",
		`{"qty":3,"placed_at":1,"price":""}`:                             `"id"`,
	} {
		var v any
		err := s.DecodeJSON([]byte(p), &v)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: got %v, want an error naming %s", p, err, field)
		}
	}
}

// BenchmarkSpikeAvroFromJSON: the cost to beat when the relay's encoder
// is written (a schema-driven JSON-to-Avro transcoder need not build a
// map per row).
func BenchmarkSpikeAvroFromJSON(b *testing.B) {
	s := avro.MustParse(spikeSchema)
	payload := []byte(`{"id":"o-1","qty":3,"note":"rush","amount":1250,"placed_at":1700000000000,"price":"\u0004\u00e2","status":"PAID"}`)
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		var native any
		if err := s.DecodeJSON(payload, &native); err != nil {
			b.Fatal(err)
		}
		var err error
		if buf, err = s.AppendEncode(buf[:0], native); err != nil {
			b.Fatal(err)
		}
	}
}
