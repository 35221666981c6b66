package publisher

// This file holds the open range of exactly-once mode: what the
// replication goroutine (enter, wait) and the lanes and the sink's senders
// (settled, addPartitions) touch, under transactions.mu. The committer
// (committer.go) closes ranges.

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
// transaction covers.
type txnRange struct {
	// inflight counts its events not yet taken care of.
	inflight int
	events   int
	bytes    int
	began    time.Time
	// last is its last event in stream order: the position it commits.
	last *replication.WALEvent
	// acks are its events' Ackers, called once the transaction commits.
	acks []deferredAck
	// waiting holds its records that reached enqueue while the previous
	// range was committing, in order.
	waiting []*outgoing
}

type deferredAck struct {
	ack   Acker
	bytes int
}

// rangeAck defers an event's Acker to its range's commit.
type rangeAck struct {
	t     *transactions
	r     *txnRange
	inner Acker
}

func (a *rangeAck) Ack(bytes int) { a.t.settled(a.r, a.inner, bytes) }

// enter adds rec to the range being collected (the next one while the
// open one commits) and defers its Acker to that range's commit.
func (t *transactions) enter(rec *outgoing, size int) *txnRange {
	t.mu.Lock()
	r := t.open
	if t.committing {
		if t.next == nil {
			t.next = &txnRange{}
		}
		r = t.next
	}
	r.inflight++
	r.events++
	r.bytes += size
	r.last = rec.ev
	if r.began.IsZero() {
		r.began = time.Now()
	}
	rec.ack = &rangeAck{t: t, r: r, inner: rec.ack}
	wake := r == t.open && (r.events == 1 || r.events >= t.cfg.MaxEvents || r.bytes >= t.cfg.MaxBytes)
	t.mu.Unlock()
	if wake {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
	return r
}

// wait reports whether rec must wait for its range to open (it was
// published while the previous range committed, or the committer is
// still enqueueing records published before it); it then queues it.
func (t *transactions) wait(rec *outgoing, r *txnRange) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r == t.open && !t.releasing {
		return false
	}
	r.waiting = append(r.waiting, rec)
	return true
}

// settled records that one of r's events is taken care of.
func (t *transactions) settled(r *txnRange, ack Acker, bytes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.acks = append(r.acks, deferredAck{ack, bytes})
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
