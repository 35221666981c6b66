package kafkaproduce

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// DecodedBatch is a record batch as a broker would read it: its producer stamp
// and its records. Fake brokers in tests read what AppendBatch wrote with
// DecodeBatch.
type DecodedBatch struct {
	Stamp    Stamp
	Messages []kafka.Message
}

// DecodeBatch reads one size-prefixed record batch (a produce request's
// records field) with kafka-go's decoder, which checks its CRC.
func DecodeBatch(b []byte) (DecodedBatch, error) {
	var rs protocol.RecordSet
	if _, err := rs.ReadFrom(bytes.NewReader(b)); err != nil {
		return DecodedBatch{}, fmt.Errorf("kafka-go cannot read the batch: %w", err)
	}
	r := rs.Records
	if s, ok := r.(*protocol.RecordStream); ok && len(s.Records) == 1 {
		r = s.Records[0]
	}
	rb, ok := r.(*protocol.RecordBatch)
	if !ok {
		return DecodedBatch{}, fmt.Errorf("records are a %T, want one *protocol.RecordBatch", rs.Records)
	}
	out := DecodedBatch{Stamp: Stamp{ID: rb.ProducerID, Epoch: rb.ProducerEpoch, BaseSeq: rb.BaseSequence, Transactional: rb.Attributes&attrTransactional != 0}}
	for {
		r, err := rb.ReadRecord()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return DecodedBatch{}, err
		}
		m := kafka.Message{Offset: r.Offset, Time: r.Time, Headers: r.Headers}
		if r.Key != nil {
			m.Key, _ = io.ReadAll(r.Key)
		}
		if r.Value != nil {
			m.Value, _ = io.ReadAll(r.Value)
		}
		out.Messages = append(out.Messages, m)
	}
}
