package kafkaproduce

import (
	"bytes"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// kafkaGoBatch is msgs as kafka-go's own encoder writes them (producer id
// -1), size-prefixed like AppendBatch.
func kafkaGoBatch(t testing.TB, msgs []*kafka.Message) []byte {
	t.Helper()
	recs := make([]kafka.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = kafka.Record{Time: m.Time, Headers: m.Headers}
		if m.Key != nil {
			recs[i].Key = kafka.NewBytes(m.Key)
		}
		if m.Value != nil {
			recs[i].Value = kafka.NewBytes(m.Value)
		}
	}
	var buf bytes.Buffer
	rs := protocol.RecordSet{Version: 2, Records: kafka.NewRecordReader(recs...)}
	if _, err := rs.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// decodeBatch is DecodeBatch, failing t on an error.
func decodeBatch(t testing.TB, b []byte) DecodedBatch {
	t.Helper()
	d, err := DecodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func sampleMessages(n int) []*kafka.Message {
	base := time.UnixMilli(1_700_000_000_123)
	msgs := make([]*kafka.Message, n)
	for i := range msgs {
		msgs[i] = &kafka.Message{
			Key: []byte(fmt.Sprintf("agg-%d", i)), Value: bytes.Repeat([]byte{byte('a' + i%26)}, i*37%300),
			Time:    base.Add(time.Duration(i%5) * time.Millisecond),
			Headers: []kafka.Header{{Key: "event_id", Value: []byte(fmt.Sprint(i))}, {Key: "empty", Value: []byte{}}},
		}
	}
	msgs[n-1].Value = nil // a tombstone
	return msgs
}

// TestAppendBatchMatchesKafkaGo: without a producer stamp the batch is
// byte for byte what kafka-go's encoder writes, the encoding the relay
// used before it encoded its own.
func TestAppendBatchMatchesKafkaGo(t *testing.T) {
	for _, n := range []int{1, 2, 130} {
		msgs := sampleMessages(n)
		got := AppendBatch([]byte("junk"), msgs, NoStamp, time.Now())[4:]
		if want := kafkaGoBatch(t, msgs); !bytes.Equal(got, want) {
			t.Fatalf("%d messages: batch differs from kafka-go's\n got %x\nwant %x", n, got, want)
		}
	}
}

// TestAppendBatchStamp: the producer id, epoch and base sequence reach
// the batch, the CRC covers them, and the records read back unchanged.
func TestAppendBatchStamp(t *testing.T) {
	msgs := sampleMessages(20)
	st := Stamp{ID: 4711, Epoch: 3, BaseSeq: math.MaxInt32 - 5}
	d := decodeBatch(t, AppendBatch(nil, msgs, st, time.Now()))
	if d.Stamp != st {
		t.Fatalf("stamp %+v, want %+v", d.Stamp, st)
	}
	checkMessages(t, d.Messages, msgs)
}

// TestAppendBatchTime: a message without a time gets now.
func TestAppendBatchTime(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	d := decodeBatch(t, AppendBatch(nil, []*kafka.Message{{Key: []byte("k")}}, NoStamp, now))
	if !d.Messages[0].Time.Equal(now) {
		t.Fatalf("time %v, want %v", d.Messages[0].Time, now)
	}
}

func checkMessages(t testing.TB, got []kafka.Message, want []*kafka.Message) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Offset != int64(i) || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) || (g.Value == nil) != (w.Value == nil) ||
			!g.Time.Equal(w.Time.Truncate(time.Millisecond)) || len(g.Headers) != len(w.Headers) {
			t.Fatalf("record %d: got %+v, want %+v", i, g, *w)
		}
		for j, h := range w.Headers {
			if g.Headers[j].Key != h.Key || !bytes.Equal(g.Headers[j].Value, h.Value) {
				t.Fatalf("record %d header %d: got %+v, want %+v", i, j, g.Headers[j], h)
			}
		}
	}
}

func TestNextSeqWraps(t *testing.T) {
	for _, c := range []struct {
		seq  int32
		n    int
		want int32
	}{{0, 1, 1}, {10, 5, 15}, {math.MaxInt32, 1, 0}, {math.MaxInt32 - 2, 5, 2}} {
		if got := NextSeq(c.seq, c.n); got != c.want {
			t.Errorf("NextSeq(%d, %d) = %d, want %d", c.seq, c.n, got, c.want)
		}
	}
}

// FuzzAppendBatch: whatever the keys, values, headers and stamp, kafka-go
// reads the batch back (CRC included) as written.
func FuzzAppendBatch(f *testing.F) {
	f.Add([]byte("key"), []byte("value"), "h", []byte("v"), int64(7), int16(0), int32(0), uint8(3), false)
	f.Add([]byte{}, []byte{}, "", []byte{}, int64(-1), int16(-1), int32(-1), uint8(1), true)
	f.Fuzz(func(t *testing.T, key, value []byte, hk string, hv []byte, id int64, epoch int16, seq int32, n uint8, nilValue bool) {
		if n == 0 {
			n = 1
		}
		msgs := make([]*kafka.Message, n)
		for i := range msgs {
			v := append([]byte(nil), value...)
			if nilValue && i%2 == 1 {
				v = nil
			}
			msgs[i] = &kafka.Message{Key: key, Value: v, Time: time.UnixMilli(int64(i) * 1000),
				Headers: []kafka.Header{{Key: hk, Value: hv}}}
		}
		st := Stamp{ID: id, Epoch: epoch, BaseSeq: seq}
		d := decodeBatch(t, AppendBatch(nil, msgs, st, time.Now()))
		if d.Stamp != st {
			t.Fatalf("stamp %+v, want %+v", d.Stamp, st)
		}
		checkMessages(t, d.Messages, msgs)
	})
}
