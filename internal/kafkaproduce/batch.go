package kafkaproduce

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"time"

	"github.com/segmentio/kafka-go"
)

// This file encodes a partition batch as one Kafka record batch (magic 2,
// uncompressed), size-prefixed the way a produce request carries it.
//
// kafka-go's protocol.RecordSet writes producer id, epoch and base
// sequence as -1, which makes every batch non-idempotent; its rawproduce
// request takes a record batch encoded by the caller instead. So this
// package encodes its own: the format is small and fixed (KIP-98,
// "Message format" in Kafka's protocol guide), and encoding straight from
// the kafka.Message fields skips the Record readers kafka-go would build.

// batchHeaderSize is the record batch header: baseOffset (8),
// batchLength (4), partitionLeaderEpoch (4), magic (1), crc (4),
// attributes (2), lastOffsetDelta (4), baseTimestamp (8), maxTimestamp
// (8), producerId (8), producerEpoch (2), baseSequence (4), recordCount (4).
const batchHeaderSize = 61

// Offsets into the header (after the 4-byte size prefix).
const (
	offBatchLength = 8
	offCRC         = 17
	offAttributes  = 21 // the CRC covers everything from here on
	offLastDelta   = 23
	offBaseTime    = 27
	offMaxTime     = 35
	offProducerID  = 43
	offEpoch       = 51
	offBaseSeq     = 53
	offCount       = 57
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Stamp is what makes a batch idempotent: the producer id and epoch the
// broker tracks, and the sequence number of the batch's first record in
// its partition. NoStamp writes a batch without one.
type Stamp struct {
	ID      int64
	Epoch   int16
	BaseSeq int32
	// Transactional marks the batch as part of the producer's open
	// transaction (attribute bit 4): read_committed consumers see it
	// only once the transaction commits.
	Transactional bool
}

// attrTransactional is a record batch's transactional attribute bit.
const attrTransactional = 1 << 4

// NoStamp is the stamp of a batch that is not idempotent.
var NoStamp = Stamp{ID: -1, Epoch: -1, BaseSeq: -1}

// AppendBatch appends msgs as one record batch, preceded by its int32
// size (a produce request's records field), to buf and returns it. A
// message without a time gets now, as kafka-go's encoder does.
func AppendBatch(buf []byte, msgs []*kafka.Message, stamp Stamp, now time.Time) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, 4+batchHeaderSize)...)
	var first, maxTS int64
	nowMS := now.UnixMilli()
	for i, m := range msgs {
		ts := nowMS
		if !m.Time.IsZero() {
			ts = m.Time.UnixMilli()
		}
		if i == 0 {
			first, maxTS = ts, ts
		}
		maxTS = max(maxTS, ts)
		buf = appendRecord(buf, m, ts-first, int64(i))
	}
	h := buf[start+4 : start+4+batchHeaderSize] // after the records: buf may have moved
	binary.BigEndian.PutUint64(h[0:], 0)        // baseOffset: the broker assigns it
	binary.BigEndian.PutUint32(h[offBatchLength:], uint32(len(buf)-start-4-12))
	binary.BigEndian.PutUint32(h[12:], math.MaxUint32) // partitionLeaderEpoch -1
	h[16] = 2                                          // magic
	var attrs uint16                                   // no compression, CreateTime
	if stamp.Transactional {
		attrs |= attrTransactional
	}
	binary.BigEndian.PutUint16(h[offAttributes:], attrs)
	binary.BigEndian.PutUint32(h[offLastDelta:], uint32(len(msgs)-1))
	binary.BigEndian.PutUint64(h[offBaseTime:], uint64(first))
	binary.BigEndian.PutUint64(h[offMaxTime:], uint64(maxTS))
	binary.BigEndian.PutUint64(h[offProducerID:], uint64(stamp.ID))
	binary.BigEndian.PutUint16(h[offEpoch:], uint16(stamp.Epoch))
	binary.BigEndian.PutUint32(h[offBaseSeq:], uint32(stamp.BaseSeq))
	binary.BigEndian.PutUint32(h[offCount:], uint32(len(msgs)))
	binary.BigEndian.PutUint32(h[offCRC:], crc32.Checksum(buf[start+4+offAttributes:], castagnoli))
	binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4))
	return buf
}

// appendRecord appends one record: its length, then attributes,
// timestamp delta, offset delta, key, value and headers, the integers as
// zigzag varints.
func appendRecord(buf []byte, m *kafka.Message, tsDelta, offDelta int64) []byte {
	n := 1 + varintSize(tsDelta) + varintSize(offDelta) + bytesSize(m.Key) + bytesSize(m.Value) + varintSize(int64(len(m.Headers)))
	for _, h := range m.Headers {
		n += varintSize(int64(len(h.Key))) + len(h.Key) + bytesSize(h.Value)
	}
	buf = binary.AppendVarint(buf, int64(n))
	buf = append(buf, 0) // record attributes: unused
	buf = binary.AppendVarint(buf, tsDelta)
	buf = binary.AppendVarint(buf, offDelta)
	buf = appendBytes(buf, m.Key)
	buf = appendBytes(buf, m.Value)
	buf = binary.AppendVarint(buf, int64(len(m.Headers)))
	for _, h := range m.Headers {
		buf = binary.AppendVarint(buf, int64(len(h.Key)))
		buf = append(buf, h.Key...)
		buf = appendBytes(buf, h.Value)
	}
	return buf
}

// appendBytes appends b with its varint length; nil is null (-1), which
// keeps a tombstone's value null rather than empty.
func appendBytes(buf, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(buf, -1)
	}
	buf = binary.AppendVarint(buf, int64(len(b)))
	return append(buf, b...)
}

func bytesSize(b []byte) int {
	if b == nil {
		return varintSize(-1)
	}
	return varintSize(int64(len(b))) + len(b)
}

// varintSize is the length of binary.AppendVarint(nil, v).
func varintSize(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// NextSeq is seq advanced by n records. Sequence numbers are int32 and
// wrap to 0 after math.MaxInt32, as the broker expects
// (DefaultRecordBatch.incrementSequence).
func NextSeq(seq int32, n int) int32 {
	return int32((int64(seq) + int64(n)) % (math.MaxInt32 + 1))
}
