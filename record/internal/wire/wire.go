// Package wire is the Confluent wire format of schema registry records
// (issue 48): framing and unframing, shared by the encoder and the decoder.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The Confluent wire format: byte 0 is the magic 0, bytes 1-4 the schema
// id big-endian, then the body (Avro binary, JSON text). Protobuf puts
// the message-index path between id and body: which message of the
// schema file the body is, as a zig-zag varint count followed by that
// many zig-zag varint indexes (the first message, [0], is written as the
// single byte 0).

// magic is the first byte of every framed record.
const magic = 0

// headerLen is magic plus the schema id.
const headerLen = 5

// maxIndexes bounds the message-index path Unframe accepts: a path is one
// index per level of nesting, so real ones are short, and a corrupt count
// must not allocate much.
const maxIndexes = 128

// ErrNotFramed: the bytes are not in the Confluent wire format (shorter
// than 5 bytes, or a first byte other than 0). ErrBadIndexes: the
// Protobuf message-index path is malformed.
var (
	ErrNotFramed  = errors.New("not in the Confluent wire format")
	ErrBadIndexes = errors.New("malformed Protobuf message indexes")
)

// Frame returns body framed with schema id. msgIndexes nil frames Avro or
// JSON Schema (no index path); non-nil frames Protobuf, with [0] (and an
// empty list, which means the same) written as the single byte 0.
func Frame(id uint32, msgIndexes []int, body []byte) []byte {
	n := headerLen + len(body)
	if msgIndexes != nil {
		n += (1 + len(msgIndexes)) * binary.MaxVarintLen64
	}
	return AppendFrame(make([]byte, 0, n), id, msgIndexes, body)
}

// AppendFrame appends Frame(id, msgIndexes, body) to dst: an encoder that
// reuses its buffer frames without allocating.
func AppendFrame(dst []byte, id uint32, msgIndexes []int, body []byte) []byte {
	dst = append(dst, magic)
	dst = binary.BigEndian.AppendUint32(dst, id)
	if msgIndexes != nil {
		dst = AppendIndexes(dst, msgIndexes)
	}
	return append(dst, body...)
}

// AppendIndexes appends the Protobuf message-index path alone.
func AppendIndexes(dst []byte, msgIndexes []int) []byte {
	if len(msgIndexes) == 0 || (len(msgIndexes) == 1 && msgIndexes[0] == 0) {
		return append(dst, 0)
	}
	dst = binary.AppendVarint(dst, int64(len(msgIndexes)))
	for _, i := range msgIndexes {
		dst = binary.AppendVarint(dst, int64(i))
	}
	return dst
}

// Unframe splits an Avro or JSON Schema record into its schema id and
// body (a sub-slice of b, not a copy).
func Unframe(b []byte) (id uint32, body []byte, err error) {
	if len(b) < headerLen || b[0] != magic {
		return 0, nil, notFramed(b)
	}
	return binary.BigEndian.Uint32(b[1:headerLen]), b[headerLen:], nil
}

// UnframeProtobuf splits a Protobuf record into its schema id, message
// indexes ([0] for the single byte 0) and body (a sub-slice of b).
func UnframeProtobuf(b []byte) (id uint32, msgIndexes []int, body []byte, err error) {
	id, rest, err := Unframe(b)
	if err != nil {
		return 0, nil, nil, err
	}
	count, n := binary.Varint(rest)
	if n <= 0 {
		return 0, nil, nil, fmt.Errorf("%w: the count is not a varint", ErrBadIndexes)
	}
	rest = rest[n:]
	if count == 0 {
		return id, []int{0}, rest, nil
	}
	// every index takes at least one byte: a count past what is left is corrupt
	if count < 0 || count > maxIndexes || count > int64(len(rest)) {
		return 0, nil, nil, fmt.Errorf("%w: count %d", ErrBadIndexes, count)
	}
	msgIndexes = make([]int, count)
	for k := range msgIndexes {
		v, n := binary.Varint(rest)
		if n <= 0 {
			return 0, nil, nil, fmt.Errorf("%w: index %d is not a varint", ErrBadIndexes, k)
		}
		if v < 0 || v > 1<<31-1 {
			return 0, nil, nil, fmt.Errorf("%w: index %d is %d", ErrBadIndexes, k, v)
		}
		msgIndexes[k] = int(v)
		rest = rest[n:]
	}
	return id, msgIndexes, rest, nil
}

func notFramed(b []byte) error {
	if len(b) < headerLen {
		return fmt.Errorf("%w: %d bytes, want at least %d", ErrNotFramed, len(b), headerLen)
	}
	return fmt.Errorf("%w: first byte %#x, want 0", ErrNotFramed, b[0])
}
