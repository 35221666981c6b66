package record

import (
	"errors"
	"testing"

	"github.com/segmentio/kafka-go"
)

// FuzzDecode feeds Decode records of any key, value and headers, in the
// shapes of every format (the header names each detects) and with
// arbitrary ones: it must never panic, and a record it cannot read is a
// *DecodeError naming the record.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("o-1"), []byte(`{"a":1}`), "event_id", "e-1", "aggregate_type", "order")
	f.Add([]byte("o-1"), []byte(`{"a":1}`), "id", "e-1", "eventType", "created")
	f.Add([]byte("o-1"), []byte(`{"specversion":"1.0","id":"e","source":"/s","type":"t","data":{}}`), "content-type",
		"application/cloudevents+json", "", "")
	f.Add([]byte(nil), []byte(nil), "ce_specversion", "1.0", "ce_id", "e-1")
	f.Fuzz(func(t *testing.T, key, value []byte, k1, v1, k2, v2 string) {
		m := kafka.Message{Topic: "t", Partition: 3, Offset: 7, Key: key, Value: value,
			Headers: []kafka.Header{{Key: k1, Value: []byte(v1)}, {Key: k2, Value: []byte(v2)}}}
		for _, format := range append(Formats(), "") {
			_, err := DecodeFormat(m, format)
			if err == nil {
				continue
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.Topic != "t" || de.Partition != 3 || de.Offset != 7 {
				t.Fatalf("DecodeFormat(%q) = %v: want a *DecodeError naming the record", format, err)
			}
		}
	})
}
