package kafkafetch

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/fetch"
)

// Control record types (the second int16 of a control record's key), as
// Kafka's ControlRecordType.
const (
	controlAbort  = 0
	controlCommit = 1
)

// decoder turns the record batches of one fetch response partition into
// the messages a consumer may see. It has no state across responses: each
// response carries the aborted transactions that overlap it, exactly as
// the Java client's CompletedFetch assumes.
type decoder struct {
	topic         string
	partition     int
	readCommitted bool
	// markers delivers control records as Records with their Marker.
	markers bool
}

// decoded is what one response yields: the messages to deliver, in
// offset order, and the offset the next fetch starts at (past every
// record the response held, delivered or not).
type decoded struct {
	msgs []Record
	next int64
	// stalled: the response held batches, yet none of its records is
	// at or past the fetch offset (a batch emptied by compaction).
	stalled bool
}

// decode reads p's record batches, fetched at offset. The batches are
// consumed (their pages go back to kafka-go's pool); every key, value and
// header of a message is a copy the caller owns. A malformed control
// record is an error: skipping it could deliver an aborted transaction.
func (d decoder) decode(p *fetch.ResponsePartition, offset int64) (decoded, error) {
	out := decoded{next: offset}
	txns := newAbortedTxns(p.AbortedTransactions)
	bs := batches(p.RecordSet.Records)
	for _, batch := range bs {
		var err error
		switch b := batch.(type) {
		case *protocol.ControlBatch:
			err = d.control(b, &txns, offset, &out)
		case *protocol.RecordBatch:
			skip := false
			if d.readCommitted && b.ProducerID >= 0 {
				txns.reach(b.BaseOffset)
				skip = b.Attributes.Transactional() && txns.aborted(b.ProducerID)
			}
			err = d.records(b, skip, producer{b.ProducerID, b.Attributes.Transactional()}, p.HighWatermark, offset, &out)
		default: // a v0/v1 message set: no transactions
			err = d.records(b, false, producer{id: -1}, p.HighWatermark, offset, &out)
		}
		if err != nil {
			return decoded{next: offset}, err
		}
	}
	out.stalled = len(bs) > 0 && out.next == offset
	return out, nil
}

// batches lists the record batches of a fetched record set: kafka-go
// decodes a response's records into a *protocol.RecordStream of
// *protocol.RecordBatch, *protocol.ControlBatch and *protocol.MessageSet.
func batches(r protocol.RecordReader) []protocol.RecordReader {
	switch s := r.(type) {
	case nil:
		return nil
	case *protocol.RecordStream:
		return s.Records
	default:
		return []protocol.RecordReader{s}
	}
}

// control consumes a control batch: never delivered as a message, it
// only moves the next offset past it and, with read_committed, an ABORT
// marker ends its producer's aborted transaction (a later transaction of
// the producer in the same response may have committed). With markers,
// each control record at or past offset becomes a Record of its Marker.
func (d decoder) control(b *protocol.ControlBatch, txns *abortedTxns, offset int64, out *decoded) error {
	// A control batch holds one record at its base offset; the cleaner
	// may have emptied it, and then its base offset is all there is.
	out.next = max(out.next, b.BaseOffset+1)
	if d.readCommitted && b.ProducerID >= 0 {
		txns.reach(b.BaseOffset)
	}
	for {
		r, err := b.ReadRecord()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("control batch at offset %d: %w", b.BaseOffset, err)
		}
		out.next = max(out.next, r.Offset+1)
		if !d.readCommitted && !d.markers {
			closeRecord(r)
			continue
		}
		cr, err := protocol.ReadControlRecord(r) // closes r's key and value
		if err != nil {
			return fmt.Errorf("control record at offset %d: %w", r.Offset, err)
		}
		if d.readCommitted && cr.Type == controlAbort {
			txns.end(b.ProducerID)
		}
		if d.markers && r.Offset >= offset && (cr.Type == controlAbort || cr.Type == controlCommit) {
			m := MarkerCommit
			if cr.Type == controlAbort {
				m = MarkerAbort
			}
			out.msgs = append(out.msgs, Record{Message: kafka.Message{Topic: d.topic, Partition: d.partition, Offset: r.Offset},
				ProducerID: b.ProducerID, Transactional: true, Marker: m})
		}
	}
}

// producer is who wrote a data batch.
type producer struct {
	id  int64
	txn bool
}

// records consumes a data batch: its records at or past offset become
// messages unless skip (an aborted transaction's batch).
func (d decoder) records(b protocol.RecordReader, skip bool, by producer, hwm, offset int64, out *decoded) error {
	for {
		r, err := b.ReadRecord()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("record batch after offset %d: %w", out.next, err)
		}
		out.next = max(out.next, r.Offset+1)
		if skip || r.Offset < offset {
			closeRecord(r)
			continue
		}
		m, err := d.message(r, hwm)
		if err != nil {
			return err
		}
		out.msgs = append(out.msgs, Record{Message: m, ProducerID: by.id, Transactional: by.txn})
	}
}

// message copies r out of the response's pages (which it releases).
func (d decoder) message(r *protocol.Record, hwm int64) (kafka.Message, error) {
	key, err := readBytes(r.Key)
	if err != nil {
		closeBytes(r.Value)
		return kafka.Message{}, fmt.Errorf("key of the record at offset %d: %w", r.Offset, err)
	}
	value, err := readBytes(r.Value)
	if err != nil {
		return kafka.Message{}, fmt.Errorf("value of the record at offset %d: %w", r.Offset, err)
	}
	m := kafka.Message{
		Topic:         d.topic,
		Partition:     d.partition,
		Offset:        r.Offset,
		HighWaterMark: hwm,
		Key:           key,
		Value:         value,
		Time:          r.Time,
	}
	if len(r.Headers) > 0 {
		// kafka-go decodes each header into fresh memory, but documents the
		// slice as reusable: the message gets a slice of its own.
		m.Headers = slices.Clone(r.Headers)
	}
	return m, nil
}

// readBytes copies b and releases its pages; a nil b (a null key or
// value) stays nil.
func readBytes(b protocol.Bytes) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	defer b.Close()
	return protocol.ReadAll(b)
}

func closeRecord(r *protocol.Record) {
	closeBytes(r.Key)
	closeBytes(r.Value)
}

func closeBytes(b protocol.Bytes) {
	if b != nil {
		b.Close()
	}
}

// abortedTxns is the Java client's pair of an aborted-transaction queue
// (ordered by first offset) and the set of producers whose aborted
// transaction has begun and not yet met its ABORT marker.
type abortedTxns struct {
	pending   []fetch.ResponseTransaction
	producers map[int64]struct{}
}

func newAbortedTxns(list []fetch.ResponseTransaction) abortedTxns {
	if len(list) == 0 {
		return abortedTxns{}
	}
	pending := slices.Clone(list)
	slices.SortStableFunc(pending, func(a, b fetch.ResponseTransaction) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return abortedTxns{pending: pending, producers: make(map[int64]struct{}, len(pending))}
}

// reach moves every aborted transaction that begins at or before offset
// into the set.
func (a *abortedTxns) reach(offset int64) {
	for len(a.pending) > 0 && a.pending[0].FirstOffset <= offset {
		a.producers[a.pending[0].ProducerID] = struct{}{}
		a.pending = a.pending[1:]
	}
}

// aborted reports whether producer's current transaction is aborted.
func (a *abortedTxns) aborted(producer int64) bool {
	_, ok := a.producers[producer]
	return ok
}

// end takes producer out of the set at its ABORT marker.
func (a *abortedTxns) end(producer int64) {
	delete(a.producers, producer)
}
