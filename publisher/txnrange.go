package publisher

// This file holds the open range of exactly-once mode: what the
// replication goroutine (enter, wait), the quarantine's (decided) and the
// lanes and the sink's senders (settled, addPartitions) touch, under
// transactions.mu. The committer (committer.go) closes ranges.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
	"github.com/outbox-relay/outbox-relay/replication"
)

// txnRange is a contiguous range of published events that one Kafka
// transaction covers. It is made of segments, in stream order: a new one
// begins at every event the quarantine decides (a gate), so that the
// committer can end the range before a gate still waiting (cut).
type txnRange struct {
	segs []*segment
	// inflight counts its events not yet taken care of; inflight,
	// events and bytes are the sums of its segments'.
	inflight int
	events   int
	bytes    int
	began    time.Time
	// waiting holds its records that reached enqueue while the previous
	// range was committing, in order.
	waiting []*outgoing
}

// segment is a part of a range: its first event is a gate or the range's
// first, and it runs to the next gate.
//
// A gate is an event that Publish handed to the quarantine (its aggregate
// is quarantined, or has an earlier event there). Deciding it takes the
// aggregate's lock in PostgreSQL, which an operator's dlq retry holds
// while it re-publishes, for as long as Kafka makes it wait. The range's
// position names its last event, so no transaction holding the gate's
// range can commit before the gate is parked or published. If the
// records after the gate were sent meanwhile, they would sit in that
// transaction, which would stay open for as long as the lock is held:
// into the coordinator's transaction timeout, which aborts it. So until
// the gate is decided (gated), the segment's other records, the later
// events of every aggregate, wait in held, and the committer commits the
// range's part before the gate on its own (cut): that part's records are
// the only ones in the transaction, its position its last event. The
// quarantine decides gates in stream order, one at a time, so a decided
// gate's predecessors are decided.
type segment struct {
	r                       *txnRange
	inflight, events, bytes int
	began                   time.Time
	// last is its last event in stream order: the position its range
	// commits when the segment ends the range.
	last *replication.WALEvent
	// acks are its events' Ackers, called once the transaction commits.
	acks []deferredAck
	// gate, gated, held: see above; gate is nil in a range's first
	// segment unless that begins with a gate. releasing is set while the
	// quarantine's goroutine enqueues held: records of the segment
	// reaching enqueue meanwhile queue behind them.
	gate      *outgoing
	gated     bool
	held      []*outgoing
	releasing bool
}

// ready is the number of r's events before its first gate still
// waiting: what a commit can cover.
func (r *txnRange) ready() int {
	n := 0
	for _, s := range r.segs {
		if s.gated {
			break
		}
		n += s.events
	}
	return n
}

// cut ends r before its first gate still waiting and returns the
// segments from there on as a new range (nil when no gate waits). Their
// records are held, or at the quarantine, so none is in the transaction.
func (r *txnRange) cut() *txnRange {
	i := slices.IndexFunc(r.segs, func(s *segment) bool { return s.gated })
	if i < 0 {
		return nil
	}
	rest := &txnRange{segs: slices.Clone(r.segs[i:]), began: r.segs[i].began}
	clear(r.segs[i:])
	r.segs = r.segs[:i]
	for _, s := range rest.segs {
		s.r = rest
		rest.inflight, rest.events, rest.bytes = rest.inflight+s.inflight, rest.events+s.events, rest.bytes+s.bytes
		r.inflight, r.events, r.bytes = r.inflight-s.inflight, r.events-s.events, r.bytes-s.bytes
	}
	return rest
}

// last is r's last event in stream order: the position it commits.
func (r *txnRange) last() *replication.WALEvent { return r.segs[len(r.segs)-1].last }

type deferredAck struct {
	ack   Acker
	bytes int
}

// rangeAck defers an event's Acker to its range's commit.
type rangeAck struct {
	t     *transactions
	s     *segment
	inner Acker
}

func (a *rangeAck) Ack(bytes int) { a.t.settled(a.s, a.inner, bytes) }

// enter adds rec to the range being collected (the next one while the
// open one commits), in a new segment when it is a gate (the quarantine
// decides it), and defers its Acker to that range's commit.
func (t *transactions) enter(rec *outgoing, size int, gate bool) *segment {
	t.mu.Lock()
	r := t.open
	if t.committing {
		if t.next == nil {
			t.next = &txnRange{}
		}
		r = t.next
	}
	now := time.Now()
	if gate || len(r.segs) == 0 {
		s := &segment{r: r, began: now}
		if gate {
			s.gate, s.gated = rec, true
		}
		r.segs = append(r.segs, s)
	}
	s := r.segs[len(r.segs)-1]
	s.inflight++
	s.events++
	s.bytes += size
	s.last = rec.ev
	r.inflight++
	r.events++
	r.bytes += size
	if r.began.IsZero() {
		r.began = now
	}
	rec.ack = &rangeAck{t: t, s: s, inner: rec.ack}
	wake := r == t.open && (r.events == 1 || r.events >= t.cfg.MaxEvents || r.bytes >= t.cfg.MaxBytes)
	t.mu.Unlock()
	if wake {
		t.wakeCommitter()
	}
	return s
}

// wakeCommitter tells the committer to look at the open range again.
func (t *transactions) wakeCommitter() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// wait reports whether rec must wait, and then queues it: behind its
// segment's gate while that waits (see segment), or for its range to
// open (it was published while the previous range committed, or the
// committer is still enqueueing records published before it).
func (t *transactions) wait(rec *outgoing, s *segment) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.releasing || s.gated && rec != s.gate {
		s.held = append(s.held, rec)
		return true
	}
	r := s.r
	if r == t.open && !t.releasing {
		return false
	}
	r.waiting = append(r.waiting, rec)
	return true
}

// decided is called by the quarantine's goroutine once it is done with
// rec (parked, dead-lettered, or queued at its router): when rec is a
// gate, the records held behind it go on, in order, and the committer
// may commit past it.
func (t *transactions) decided(rec *outgoing) {
	s := rec.seg
	t.mu.Lock()
	if s == nil || s.gate != rec || !s.gated {
		t.mu.Unlock()
		return
	}
	s.gated, s.releasing = false, true
	for {
		recs := s.held
		s.held = nil
		if len(recs) == 0 {
			break
		}
		if r := s.r; r != t.open || t.releasing {
			r.waiting = append(r.waiting, recs...)
			continue
		}
		t.mu.Unlock()
		for _, rec := range recs {
			t.p.enqueueNow(rec)
		}
		t.mu.Lock()
	}
	s.releasing = false
	t.mu.Unlock()
	t.wakeCommitter()
}

// settled records that one of s's events is taken care of.
func (t *transactions) settled(s *segment, ack Acker, bytes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.acks = append(s.acks, deferredAck{ack, bytes})
	s.inflight--
	r := s.r
	r.inflight--
	if r.inflight == 0 && r == t.open && t.drained != nil {
		close(t.drained)
		t.drained = nil
	}
}

// addPartitions adds the partitions of bs that the open transaction does
// not have yet (AddPartitionsToTxn), before the batches are produced: a
// broker refuses (or, before KIP-890, would strand) a transactional
// batch for a partition the coordinator does not know is in the
// transaction. It answers per batch: nil when every partition is
// in the transaction, else one error per batch of bs. A failure of the
// whole request, or one that ends the transaction (TransactionError),
// answers every batch alike. A partition's own failure (a topic the
// relay may not write, say) answers only its batches: Kafka then adds no
// partition of the request and answers the others OPERATION_NOT_ATTEMPTED,
// and their batches get errNotAttempted, which is transient, so the
// events of other topics are retried instead of sharing the failing
// topic's fate.
func (t *transactions) addPartitions(ctx context.Context, bs []*kafkaproduce.Batch) []error {
	var missing []kafkaproduce.TopicPartition
	t.mu.Lock()
	for _, b := range bs {
		k := kafkaproduce.TopicPartition{Topic: b.Topic, Partition: b.Partition}
		if !t.added[k] && !slices.Contains(missing, k) {
			missing = append(missing, k)
		}
	}
	t.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	all := func(err error) []error {
		errs := make([]error, len(bs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	failed, err := t.coord.AddPartitions(ctx, t.p.producer.ID(), missing)
	if err != nil {
		if te := t.failure("AddPartitionsToTxn", err); te != nil {
			return all(te)
		}
		return all(err)
	}
	for _, err := range failed {
		if te := t.failure("AddPartitionsToTxn", err); te != nil {
			return all(te)
		}
	}
	if len(failed) == 0 {
		t.mu.Lock()
		if len(t.added) == 0 {
			t.began = time.Now()
		}
		for _, k := range missing {
			t.added[k] = true
		}
		t.mu.Unlock()
		return nil
	}
	errs := make([]error, len(bs))
	for i, b := range bs {
		err, ok := failed[kafkaproduce.TopicPartition{Topic: b.Topic, Partition: b.Partition}]
		if !ok || errors.Is(err, kafkaproduce.ErrOperationNotAttempted) {
			// Held back by Kafka, or in the transaction already while
			// the request is not sent for the others' sake: retried.
			errs[i] = errNotAttempted
			continue
		}
		errs[i] = fmt.Errorf("AddPartitionsToTxn %s[%d]: %w", b.Topic, b.Partition, err)
	}
	return errs
}

// errNotAttempted answers a batch whose partition Kafka did not add to
// the transaction because another partition of the same request failed
// (OPERATION_NOT_ATTEMPTED), or whose produce request was not sent for
// that reason. It is transient: the batch is retried.
var errNotAttempted = fmt.Errorf("AddPartitionsToTxn: not attempted because another partition of the request failed: %w", kafkaproduce.ErrOperationNotAttempted)
