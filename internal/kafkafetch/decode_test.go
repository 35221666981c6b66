package kafkafetch

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/fetch"
)

// tLog builds a partition's log: batches at consecutive offsets, each
// data record keyed "k<offset>" with value "v<offset>".
type tLog struct {
	next    int64
	batches []tBatch
}

// data appends a data batch of n records of producer pid (-1: none) and
// returns its base offset.
func (l *tLog) data(pid int64, txn bool, n int) int64 {
	b := tBatch{base: l.next, pid: pid, txn: txn, control: -1, ts: 1_700_000_000_000}
	for i := range n {
		o := strconv.FormatInt(l.next+int64(i), 10)
		b.records = append(b.records, tRecord{key: []byte("k" + o), value: []byte("v" + o)})
	}
	l.batches = append(l.batches, b)
	l.next += int64(n)
	return b.base
}

// marker appends producer pid's COMMIT or ABORT marker and returns its offset.
func (l *tLog) marker(pid int64, typ int) int64 {
	l.batches = append(l.batches, tBatch{base: l.next, pid: pid, txn: true, control: typ})
	l.next++
	return l.next - 1
}

// offsets lists the offsets of msgs, checking each one's key and value.
func offsetsOf(t *testing.T, out decoded) []int64 {
	t.Helper()
	var got []int64
	for _, m := range out.msgs {
		o := strconv.FormatInt(m.Offset, 10)
		if string(m.Key) != "k"+o || string(m.Value) != "v"+o {
			t.Errorf("message at offset %d: key %q value %q", m.Offset, m.Key, m.Value)
		}
		got = append(got, m.Offset)
	}
	return got
}

func span(from, to int64) []int64 {
	var s []int64
	for o := from; o <= to; o++ {
		s = append(s, o)
	}
	return s
}

func decodeLog(t *testing.T, l *tLog, aborted []fetch.ResponseTransaction, offset int64, readCommitted bool) decoded {
	t.Helper()
	p := parse(t, tResponse{topic: "t", partition: 3, hwm: l.next, aborted: aborted, batches: l.batches}.encode())
	out, err := decoder{topic: "t", partition: 3, readCommitted: readCommitted}.decode(p, offset)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDecodeTransactions: producers 1 and 2 write transactions that
// interleave, 1's first one aborts; producer 3 is idempotent (not
// transactional) and producer -1 has no id at all. read_committed
// delivers everything but the aborted transaction, read_uncommitted
// everything but the markers; both move past the trailing marker.
func TestDecodeTransactions(t *testing.T) {
	var l tLog
	l.data(-1, false, 2)       // 0-1
	a1 := l.data(1, true, 3)   // 2-4   P1 tx (aborted)
	l.data(2, true, 2)         // 5-6   P2 tx (committed)
	l.data(1, true, 2)         // 7-8   P1 tx (aborted)
	l.data(3, false, 2)        // 9-10  P3 idempotent
	l.marker(2, controlCommit) // 11
	l.data(1, false, 1)        // 12    P1, not transactional: never skipped
	l.marker(1, controlAbort)  // 13
	l.data(1, true, 2)         // 14-15 P1's next tx (committed)
	l.data(-1, false, 1)       // 16
	l.marker(1, controlCommit) // 17
	aborted := []fetch.ResponseTransaction{{ProducerID: 1, FirstOffset: a1}}

	out := decodeLog(t, &l, aborted, 0, true)
	want := slices.Concat(span(0, 1), span(5, 6), span(9, 10), []int64{12}, span(14, 16))
	if got := offsetsOf(t, out); !slices.Equal(got, want) {
		t.Errorf("read_committed: offsets %v, want %v", got, want)
	}
	if out.next != 18 {
		t.Errorf("read_committed: next offset %d, want 18 (past the last marker)", out.next)
	}

	out = decodeLog(t, &l, aborted, 0, false)
	want = slices.Concat(span(0, 10), []int64{12}, span(14, 16))
	if got := offsetsOf(t, out); !slices.Equal(got, want) {
		t.Errorf("read_uncommitted: offsets %v, want %v", got, want)
	}
	if out.next != 18 {
		t.Errorf("read_uncommitted: next offset %d, want 18", out.next)
	}
}

// TestDecodeCommittedAbortedCommitted is brod's bug (kafka4beam/brod
// #493): one producer's committed tx1, aborted tx2 and committed tx3 in
// one response. A filter that keeps "producer 7 aborted" for the whole
// response drops tx3; the ABORT marker must end it.
func TestDecodeCommittedAbortedCommitted(t *testing.T) {
	var l tLog
	l.data(7, true, 2) // 0-1 tx1
	l.marker(7, controlCommit)
	tx2 := l.data(7, true, 2) // 3-4 tx2
	l.data(7, true, 1)        // 5
	l.marker(7, controlAbort)
	l.data(7, true, 3) // 7-9 tx3
	l.marker(7, controlCommit)
	out := decodeLog(t, &l, []fetch.ResponseTransaction{{ProducerID: 7, FirstOffset: tx2}}, 0, true)
	want := slices.Concat(span(0, 1), span(7, 9))
	if got := offsetsOf(t, out); !slices.Equal(got, want) {
		t.Errorf("offsets %v, want tx1 and tx3: %v", got, want)
	}
	if out.next != 11 {
		t.Errorf("next offset %d, want 11", out.next)
	}
}

// TestDecodeAbortedListOrder: the broker's list of aborted transactions
// need not be ordered; two producers abort, one of them twice.
func TestDecodeAbortedListOrder(t *testing.T) {
	var l tLog
	a := l.data(1, true, 1) // 0 P1 aborted
	b := l.data(2, true, 1) // 1 P2 aborted
	l.marker(1, controlAbort)
	l.data(1, true, 1) // 3 P1 committed
	l.marker(2, controlAbort)
	l.marker(1, controlCommit)
	c := l.data(1, true, 2) // 6-7 P1 aborted again
	l.data(2, true, 1)      // 8 P2 committed
	l.marker(1, controlAbort)
	l.marker(2, controlCommit)
	aborted := []fetch.ResponseTransaction{{ProducerID: 1, FirstOffset: c}, {ProducerID: 2, FirstOffset: b}, {ProducerID: 1, FirstOffset: a}}
	out := decodeLog(t, &l, aborted, 0, true)
	if got, want := offsetsOf(t, out), []int64{3, 8}; !slices.Equal(got, want) {
		t.Errorf("offsets %v, want %v", got, want)
	}
}

// TestDecodeBelowRequestedOffset: a fetch at offset 5 returns the batch
// 3-7 whole; 3 and 4 are not delivered. An aborted transaction that began
// before the fetch offset is still skipped.
func TestDecodeBelowRequestedOffset(t *testing.T) {
	var l tLog
	l.next = 3
	l.data(-1, false, 5)      // 3-7
	a := l.data(4, true, 2)   // 8-9 aborted
	l.batches = l.batches[1:] // a fetch at 9: the response starts at the batch holding 9
	l.data(5, true, 1)        // 10 P5 committed
	l.marker(4, controlAbort) // 11
	l.marker(5, controlCommit)
	out := decodeLog(t, &l, []fetch.ResponseTransaction{{ProducerID: 4, FirstOffset: a}}, 9, true)
	if got, want := offsetsOf(t, out), []int64{10}; !slices.Equal(got, want) {
		t.Errorf("offsets %v, want %v", got, want)
	}
	if out.next != 13 {
		t.Errorf("next offset %d, want 13", out.next)
	}

	var m tLog
	m.next = 3
	m.data(-1, false, 5) // 3-7
	out = decodeLog(t, &m, nil, 5, true)
	if got, want := offsetsOf(t, out), span(5, 7); !slices.Equal(got, want) {
		t.Errorf("offsets %v, want %v", got, want)
	}
}

// TestDecodeOnlyMarkers: a response of markers and aborted records yields
// no message but still moves the offset past all of them.
func TestDecodeOnlyMarkers(t *testing.T) {
	var l tLog
	l.next = 40
	a := l.data(9, true, 3)
	l.marker(9, controlAbort)
	l.marker(8, controlCommit)
	out := decodeLog(t, &l, []fetch.ResponseTransaction{{ProducerID: 9, FirstOffset: a}}, 40, true)
	if len(out.msgs) != 0 || out.next != 45 || out.stalled {
		t.Errorf("got %d messages, next %d, stalled %v; want none, 45, not stalled", len(out.msgs), out.next, out.stalled)
	}
	out = decodeLog(t, &tLog{next: 45}, nil, 45, true)
	if len(out.msgs) != 0 || out.next != 45 || out.stalled {
		t.Errorf("empty response: %d messages, next %d, stalled %v", len(out.msgs), out.next, out.stalled)
	}
}

// TestDecodeMessageFields: every field a kafka.Reader sets, and memory
// the caller owns.
func TestDecodeMessageFields(t *testing.T) {
	ts := time.UnixMilli(1_700_000_123_456)
	b := tBatch{base: 100, pid: -1, control: -1, ts: ts.UnixMilli(), records: []tRecord{
		{key: []byte("a"), value: []byte("payload"), headers: []protocol.Header{{Key: "h1", Value: []byte("x")}, {Key: "h2", Value: nil}}},
		{key: nil, value: []byte{}},
	}}
	p := parse(t, tResponse{topic: "orders", partition: 2, hwm: 250, batches: []tBatch{b}}.encode())
	out, err := decoder{topic: "orders", partition: 2, readCommitted: true}.decode(p, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.msgs) != 2 {
		t.Fatalf("%d messages, want 2", len(out.msgs))
	}
	m := out.msgs[0]
	if m.Topic != "orders" || m.Partition != 2 || m.Offset != 100 || m.HighWaterMark != 250 || !m.Time.Equal(ts) {
		t.Errorf("message: %s/%d@%d hwm %d time %v", m.Topic, m.Partition, m.Offset, m.HighWaterMark, m.Time)
	}
	if string(m.Key) != "a" || string(m.Value) != "payload" || len(m.Headers) != 2 ||
		m.Headers[0].Key != "h1" || string(m.Headers[0].Value) != "x" || m.Headers[1].Key != "h2" || len(m.Headers[1].Value) != 0 {
		t.Errorf("message: key %q value %q headers %+v", m.Key, m.Value, m.Headers)
	}
	if m2 := out.msgs[1]; m2.Key != nil || m2.Value == nil || len(m2.Value) != 0 || m2.Offset != 101 {
		t.Errorf("second message: key %v (want nil), value %v (want empty, not nil), offset %d", m2.Key, m2.Value, m2.Offset)
	}
	// The bytes are copies: decoding the same wire again into the pages
	// kafka-go recycles leaves them alone.
	for range 3 {
		parse(t, tResponse{topic: "orders", partition: 2, hwm: 250, batches: []tBatch{{base: 100, pid: -1, control: -1,
			records: []tRecord{{key: bytes.Repeat([]byte("z"), 1), value: bytes.Repeat([]byte("z"), 7)}}}}}.encode())
	}
	if string(m.Key) != "a" || string(m.Value) != "payload" {
		t.Errorf("message changed after more decoding: key %q value %q", m.Key, m.Value)
	}
}

// TestDecodeMalformedControlRecord: a control record whose key is not
// version+type is an error, never a silent skip (it could be the ABORT
// that hides a transaction).
func TestDecodeMalformedControlRecord(t *testing.T) {
	p := parse(t, tResponse{topic: "t", hwm: 2, raw: malformedControl(0)}.encode())
	_, err := decoder{topic: "t", readCommitted: true}.decode(p, 0)
	if err == nil {
		t.Fatal("decoded a control record with a 3-byte key")
	}
	// read_uncommitted has no use for the markers: it only moves past them.
	p = parse(t, tResponse{topic: "t", hwm: 2, raw: malformedControl(0)}.encode())
	out, err := decoder{topic: "t"}.decode(p, 0)
	if err != nil || out.next != 1 || len(out.msgs) != 0 {
		t.Errorf("read_uncommitted: %d messages, next %d, %v", len(out.msgs), out.next, err)
	}
}

// malformedControl is a control batch at base whose record key has 3 bytes.
func malformedControl(base int64) []byte {
	b := tBatch{base: base, pid: 1, txn: true, control: -1, records: []tRecord{{key: []byte{0, 0, 0}, value: nil}}}.encode()
	// Set the control attribute (byte 22: attributes' low byte, after
	// base offset 8, length 4, leader epoch 4, magic 1, crc 4, high byte 1)
	// and fix the CRC.
	b[22] |= byte(protocol.Control)
	binaryPutCRC(b)
	return b
}

func TestRetriable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errors.New("dial tcp: connection refused"), true},
		{fetch.NewError(protocol.NewErrNoLeader("t", 0)), true},
		{errMalformed, false},
		{kafka.NotLeaderForPartition, true},
		{fmt.Errorf("wrapped: %w", kafka.UnknownTopicOrPartition), true},
		{kafka.LeaderNotAvailable, true},
		{kafka.FencedLeaderEpoch, true},
		{kafka.RequestTimedOut, true},
		{kafka.OffsetOutOfRange, false},
		{kafka.TopicAuthorizationFailed, false},
		{kafka.SASLAuthenticationFailed, false},
		{&OffsetOutOfRangeError{}, false},
	} {
		if got := retriable(c.err); got != c.want {
			t.Errorf("retriable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestDecodeMarkers: with markers, read_uncommitted delivers every data
// record with its producer and whether it is transactional, and each
// transaction marker as a Record of its own, in log order: what a reader
// needs to decide transactions past the last stable offset itself.
func TestDecodeMarkers(t *testing.T) {
	var l tLog
	l.data(-1, false, 1)       // 0
	l.data(1, true, 2)         // 1-2  P1 tx (committed at 5)
	l.data(2, true, 1)         // 3    P2 tx (aborted at 6)
	l.data(3, false, 1)        // 4    P3 idempotent
	l.marker(1, controlCommit) // 5
	l.marker(2, controlAbort)  // 6
	l.data(2, true, 1)         // 7    P2 tx, still open
	p := parse(t, tResponse{topic: "t", partition: 3, hwm: l.next, batches: l.batches}.encode())
	out, err := decoder{topic: "t", partition: 3, markers: true}.decode(p, 2)
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		off    int64
		pid    int64
		txn    bool
		marker Marker
	}
	var got []rec
	for _, r := range out.msgs {
		got = append(got, rec{r.Offset, r.ProducerID, r.Transactional, r.Marker})
	}
	want := []rec{{2, 1, true, MarkerNone}, {3, 2, true, MarkerNone}, {4, 3, false, MarkerNone},
		{5, 1, true, MarkerCommit}, {6, 2, true, MarkerAbort}, {7, 2, true, MarkerNone}}
	if !slices.Equal(got, want) {
		t.Errorf("records %v\nwant    %v", got, want)
	}
	if out.next != 8 {
		t.Errorf("next offset %d, want 8", out.next)
	}
	// Without markers the same response has no control records.
	p = parse(t, tResponse{topic: "t", partition: 3, hwm: l.next, batches: l.batches}.encode())
	out, err = decoder{topic: "t", partition: 3}.decode(p, 0)
	if err != nil || len(out.msgs) != 6 {
		t.Fatalf("%d records, %v; want 6", len(out.msgs), err)
	}
}
