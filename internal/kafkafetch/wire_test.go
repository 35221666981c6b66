package kafkafetch

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/fetch"
)

// The tests encode fetch responses byte for byte as a broker sends them
// (fetch v11, record batches v2 with producer ids, the transactional and
// control attributes, CRC-32C) and decode them with kafka-go's protocol
// package, so the path under test is the reader's own: kafka-go's decoding,
// then decoder.decode. kafka-go's own record writer cannot help: it writes
// producer id -1 and no control batches.

// tRecord is a data record; nil key or value is null.
type tRecord struct {
	key, value []byte
	headers    []protocol.Header
}

// tBatch is a record batch at base: data records at base, base+1, ...,
// or (control >= 0) one control record of that type at base.
type tBatch struct {
	base    int64
	pid     int64 // -1: no producer id
	txn     bool
	control int // -1: a data batch; controlAbort or controlCommit
	records []tRecord
	ts      int64 // first timestamp, ms
}

// last is the batch's last offset.
func (b tBatch) last() int64 {
	if b.control >= 0 {
		return b.base
	}
	return b.base + int64(len(b.records)) - 1
}

func be16(b []byte, v int16) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }
func be32(b []byte, v int32) []byte { return binary.BigEndian.AppendUint32(b, uint32(v)) }
func be64(b []byte, v int64) []byte { return binary.BigEndian.AppendUint64(b, uint64(v)) }

func varBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	return append(binary.AppendVarint(b, int64(len(v))), v...)
}

func encodeRecord(b []byte, offsetDelta int, r tRecord) []byte {
	rec := []byte{0}                  // attributes
	rec = binary.AppendVarint(rec, 0) // timestamp delta
	rec = binary.AppendVarint(rec, int64(offsetDelta))
	rec = varBytes(rec, r.key)
	rec = varBytes(rec, r.value)
	rec = binary.AppendVarint(rec, int64(len(r.headers)))
	for _, h := range r.headers {
		rec = varBytes(rec, []byte(h.Key))
		rec = varBytes(rec, h.Value)
	}
	return append(binary.AppendVarint(b, int64(len(rec))), rec...)
}

// encode is the batch as a broker stores and sends it.
func (b tBatch) encode() []byte {
	records := b.records
	attrs := int16(0)
	if b.txn {
		attrs |= int16(protocol.Transactional)
	}
	if b.control >= 0 {
		attrs |= int16(protocol.Control)
		key := be16(be16(nil, 0), int16(b.control))
		value := be32(be16(nil, 0), 0) // version, coordinator epoch
		records = []tRecord{{key: key, value: value}}
	}
	epoch, seq := int16(-1), int32(-1)
	if b.pid >= 0 {
		epoch, seq = 0, 0
	}
	body := be16(nil, attrs)
	body = be32(body, int32(len(records)-1)) // last offset delta
	body = be64(body, b.ts)
	body = be64(body, b.ts)
	body = be64(body, b.pid)
	body = be16(body, epoch)
	body = be32(body, seq)
	body = be32(body, int32(len(records)))
	for i, r := range records {
		body = encodeRecord(body, i, r)
	}
	crc := crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))
	out := be64(nil, b.base)
	out = be32(out, int32(4+1+4+len(body)))
	out = be32(out, 0) // partition leader epoch
	out = append(out, 2)
	out = be32(out, int32(crc))
	return append(out, body...)
}

// tResponse is a fetch response of one partition.
type tResponse struct {
	topic     string
	partition int32
	errorCode int16
	hwm       int64
	aborted   []fetch.ResponseTransaction
	batches   []tBatch
	raw       []byte // appended to the record set after the batches
}

// encode is the response as a broker sends it for fetch v11, size and
// correlation id first.
func (r tResponse) encode() []byte {
	var set []byte
	for _, b := range r.batches {
		set = append(set, b.encode()...)
	}
	set = append(set, r.raw...)
	body := be32(nil, 1) // correlation id
	body = be32(body, 0) // throttle
	body = be16(body, 0) // error code
	body = be32(body, 0) // session id
	body = be32(body, 1) // topics
	body = be16(body, int16(len(r.topic)))
	body = append(body, r.topic...)
	body = be32(body, 1) // partitions
	body = be32(body, r.partition)
	body = be16(body, r.errorCode)
	body = be64(body, r.hwm)
	body = be64(body, r.hwm) // last stable offset
	body = be64(body, 0)     // log start offset
	if r.aborted == nil {
		body = be32(body, -1)
	} else {
		body = be32(body, int32(len(r.aborted)))
		for _, a := range r.aborted {
			body = be64(be64(body, a.ProducerID), a.FirstOffset)
		}
	}
	body = be32(body, -1) // preferred read replica
	body = be32(body, int32(len(set)))
	body = append(body, set...)
	return append(be32(nil, int32(len(body))), body...)
}

// parse decodes wire bytes with kafka-go, as the Transport does.
func parse(t testing.TB, wire []byte) *fetch.ResponsePartition {
	t.Helper()
	_, m, err := protocol.ReadResponse(bufio.NewReader(bytes.NewReader(wire)), protocol.Fetch, 11)
	if err != nil {
		t.Fatalf("kafka-go cannot read the response: %v", err)
	}
	res := m.(*fetch.Response)
	if len(res.Topics) != 1 || len(res.Topics[0].Partitions) != 1 {
		t.Fatalf("response: %+v", res)
	}
	return &res.Topics[0].Partitions[0]
}

// binaryPutCRC recomputes a v2 batch's CRC-32C after the batch was edited.
func binaryPutCRC(b []byte) {
	binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
}
