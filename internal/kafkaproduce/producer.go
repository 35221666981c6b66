package kafkaproduce

import (
	"context"
	"errors"
	"net"
	"sync"

	"github.com/segmentio/kafka-go"
)

// This file holds the idempotent producer's state: the producer id the
// broker assigned (InitProducerId) and, per partition, the next sequence
// number.
//
// With a producer id, the broker checks each partition's batches: a batch
// whose sequence numbers it has already stored (a retry of a request that
// timed out after the leader wrote it, or that a new leader received
// from the old one) is acknowledged without being stored again, and a
// batch that does not follow the last one is refused
// (OUT_OF_ORDER_SEQUENCE_NUMBER). A lane keeps one batch in flight and
// retries that batch until it is acknowledged, so its sequence numbers
// simply follow each other: a retry carries the same numbers, the next
// batch starts where the acknowledged one ended.
//
// When the broker no longer knows the id (UNKNOWN_PRODUCER_ID, the
// producer state expired), or refuses its epoch or sequence, the
// publisher takes a new id and every partition starts again at 0. The
// batch being retried then carries the new id, so the broker cannot
// recognise it if the old id's attempt was stored: at most that one batch
// per partition may be duplicated, and nothing is lost or reordered,
// because no later batch of the partition was sent.

// ErrNoProducerID is a transactional Producer's stamp before Adopt gave
// it the transactional id's producer id: a bug in the caller.
var ErrNoProducerID = errors.New("kafkaproduce: transactional producer used before its InitProducerId")

// Producer hands out a producer id and, per partition, the sequence
// numbers of the next batch. Its methods are safe for concurrent use by
// the partitions' senders.
type Producer struct {
	rt   kafka.RoundTripper
	addr net.Addr
	// transactional is set for exactly-once: the id comes from the
	// transactional id's InitProducerId (Adopt) and is never renewed by
	// Stamp, because a new epoch aborts the open transaction; every batch
	// is stamped transactional.
	transactional bool

	mu  sync.Mutex
	id  int64 // -1 until InitProducerId answered
	ep  int16
	gen uint64 // incremented with every new id
	// seqs is the next sequence number per partition under gen. It keeps
	// an entry for every partition ever written (a lane evicted while
	// idle must not restart at 0 under the same id): a few words per
	// partition.
	seqs map[TopicPartition]*Seq
}

// Seq is one partition's sequence state; only the partition's sender
// touches it (a caller starts a new sender only after the old one
// stopped).
type Seq struct {
	gen  uint64
	next int32
}

// NewProducer returns a producer whose id comes from rt's brokers at addr:
// an idempotent producer's (InitProducerID) at the first Stamp, or, when
// transactional, the transactional id's (Adopt).
func NewProducer(rt kafka.RoundTripper, addr net.Addr, transactional bool) *Producer {
	return &Producer{rt: rt, addr: addr, transactional: transactional, id: -1, seqs: map[TopicPartition]*Seq{}}
}

// Sequence returns the sequence state of a partition.
func (p *Producer) Sequence(topic string, partition int) *Seq {
	k := TopicPartition{topic, partition}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.seqs[k]
	if s == nil {
		s = &Seq{}
		p.seqs[k] = s
	}
	return s
}

// Stamp returns the producer stamp for s's next batch, taking a producer
// id first if there is none: the id, its epoch and s's next sequence
// number (0 after a new id).
func (p *Producer) Stamp(ctx context.Context, s *Seq) (Stamp, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id < 0 {
		if p.transactional {
			return Stamp{}, ErrNoProducerID
		}
		if err := p.initLocked(ctx); err != nil {
			return Stamp{}, err
		}
	}
	if s.gen != p.gen {
		s.gen, s.next = p.gen, 0
	}
	return Stamp{ID: p.id, Epoch: p.ep, BaseSeq: s.next, Transactional: p.transactional}, nil
}

// Acked advances s past a batch of n records stamped with st.
func (p *Producer) Acked(s *Seq, st Stamp, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.gen == p.gen && s.next == st.BaseSeq {
		s.next = NextSeq(st.BaseSeq, n)
	}
}

// Reset drops the producer id st was stamped with, so the next stamp
// takes a new one; a later id (another sender reset first) is kept.
func (p *Producer) Reset(st Stamp) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.id == st.ID && p.ep == st.Epoch {
		p.id, p.ep = -1, -1 // the next stamp takes a new id, under a new gen
	}
}

// initLocked takes a producer id (InitProducerID: straight to a broker, no
// transaction coordinator involved). Callers hold mu: senders wait for
// the one answer.
func (p *Producer) initLocked(ctx context.Context) error {
	pid, err := InitProducerID(ctx, p.rt, p.addr)
	if err != nil {
		return err
	}
	p.id, p.ep = pid.ID, pid.Epoch
	p.gen++
	return nil
}

// Adopt makes id the producer's (a transactional id's InitProducerId):
// every partition starts again at sequence 0.
func (p *Producer) Adopt(id ProducerID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.id, p.ep = id.ID, id.Epoch
	p.gen++
}

// ID is the producer id and epoch (-1 before one was taken).
func (p *Producer) ID() ProducerID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ProducerID{ID: p.id, Epoch: p.ep}
}
