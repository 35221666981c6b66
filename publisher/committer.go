package publisher

// This file holds the committer, the goroutine of exactly-once mode
// (transactions.run, the startstop service transactions.loop, started by
// Begin and stopped by Publisher.Close): it closes the open range, waits
// for its events, writes the position record and ends the Kafka
// transaction, then begins the next. It is the only goroutine that calls
// EndTxn; abandon runs after Close stopped it.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
	"github.com/outbox-relay/outbox-relay/replication"
)

// run is the committer: it commits the open range after Interval, or
// early once it is full, until ctx ends (the publisher closes) or a
// commit fails.
// Only the part before a gate still waiting counts (see segment): with
// none, the committer waits for the quarantine's wake.
func (t *transactions) run(ctx context.Context) {
	p := t.p
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		t.mu.Lock()
		r := t.open
		wait := time.Duration(-1) // nothing to commit: wait for a wake
		if r.ready() > 0 {
			wait = max(time.Until(r.began.Add(t.cfg.Interval)), 0)
			if r.events >= t.cfg.MaxEvents || r.bytes >= t.cfg.MaxBytes {
				wait = 0
			}
		}
		t.mu.Unlock()
		if wait == 0 {
			if err := t.commit(); err != nil {
				if p.ctx.Err() == nil {
					p.fail(err)
				}
				return
			}
			continue
		}
		var tick <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			tick = timer.C
		}
		select {
		case <-t.wake:
		case <-tick:
		case <-ctx.Done():
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

// commit closes the open range, waits until each of its events is taken
// care of, writes its position record, commits the Kafka transaction,
// then calls the range's Ackers and opens the next range.
//
// The range closes before its first gate still waiting (cut): the gate
// and everything after it, none of it sent, become the next range, so an
// aggregate's lock held by an operator never keeps a transaction open,
// and the events before it commit now. The ones after it wait for the
// gate (see segment).
func (t *transactions) commit() error {
	p := t.p
	t.mu.Lock()
	r := t.open
	if r.ready() == 0 {
		t.mu.Unlock()
		return nil // only a waiting gate and what it holds: nothing to commit
	}
	t.next = r.cut() // t.next is nil while nothing commits
	t.committing = true
	drained := make(chan struct{})
	if r.inflight == 0 {
		close(drained)
	} else {
		t.drained = drained
	}
	t.mu.Unlock()
	started := time.Now()
	// The position record goes out after the range's events, not beside
	// them: two produce requests of one transactional id that reach a
	// partition leader together, each with a partition new to the
	// transaction, make it verify both with the coordinator (KIP-890),
	// and the first verification is cancelled (NOT_ENOUGH_REPLICAS,
	// "Unable to verify ... NETWORK_EXCEPTION"). Sent beside the events,
	// the record made p50 at 1,000 events/s 70 ms instead of 21 ms
	// (docs/benchmarks.md, "Issue 35").
	select {
	case <-drained:
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
	if err := t.writePosition(r.last()); err != nil {
		return err
	}
	if err := t.end(true); err != nil {
		return err
	}
	p.m.TransactionCommitted(time.Since(r.began), time.Since(started), r.events)

	t.mu.Lock()
	next := t.next
	if next == nil {
		next = &txnRange{}
	}
	var again []*kafkaproduce.Batch
	if next.events > 0 {
		again = t.partitionsAgain(next) // before clear: from the committed one
	}
	clear(t.added)
	t.began = time.Time{}
	t.open, t.next, t.committing, t.releasing = next, nil, false, true
	// Not when the next range begins with a gate still waiting: nothing
	// of it can be sent yet, and adding a partition would start the
	// coordinator's timeout for as long as the gate waits.
	begin := next.events > 0 && !next.segs[0].gated
	t.mu.Unlock()
	for _, s := range r.segs {
		for _, a := range s.acks {
			a.ack.Ack(a.bytes)
		}
	}
	if begin {
		t.beginNext(again)
	}
	t.release(next)
	return nil
}

// maxPartitionsAgain bounds the partitions beginNext adds ahead of the
// next transaction's records.
const maxPartitionsAgain = 64

// partitionsAgain is the partitions of the committed transaction whose
// topics the next range's waiting records go to (t.mu held): at live
// rates consecutive transactions write mostly the same partitions, so
// adding them ahead saves the lanes' own AddPartitionsToTxn round trip
// before their first produce. A partition added but not written costs
// only its transaction marker.
func (t *transactions) partitionsAgain(next *txnRange) []*kafkaproduce.Batch {
	topics := map[string]bool{}
	for _, rec := range next.waiting {
		topics[rec.msg.Topic] = true
	}
	var bs []*kafkaproduce.Batch
	for k := range t.added {
		if k != t.positions && topics[k.Topic] && len(bs) < maxPartitionsAgain {
			bs = append(bs, &kafkaproduce.Batch{Topic: k.Topic, Partition: k.Partition})
		}
	}
	return bs
}

// beginNext adds the positions partition, which every transaction
// writes, to the next transaction before its held events are released,
// with the partitions again (partitionsAgain) the previous one wrote.
// Right after EndTxn the coordinator is still writing the previous
// transaction's markers and answers CONCURRENT_TRANSACTIONS for a few
// milliseconds; polled here every millisecond, the wait ends as soon as
// it can, once, instead of in every lane's first request with a backoff
// each (with group commit, every transaction would pay it). Anything
// else is left to the lanes, which retry or fail as for any request;
// when one of the partitions again is refused (its topic deleted, say),
// Kafka adds none of the request, so the positions partition is added
// on its own.
func (t *transactions) beginNext(again []*kafkaproduce.Batch) {
	bs := append([]*kafkaproduce.Batch{{Topic: t.positions.Topic, Partition: t.positions.Partition}}, again...)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		errs := t.addPartitions(t.p.ctx, bs)
		if errs == nil {
			return
		}
		if !errors.Is(errs[0], kafka.ConcurrentTransactions) {
			if len(bs) == 1 {
				return
			}
			bs = bs[:1]
			continue
		}
		if !t.p.sleep(time.Millisecond) {
			return
		}
	}
}

// release enqueues the records of r that waited for it to open, in
// order, including those that arrive while it does.
func (t *transactions) release(r *txnRange) {
	for {
		t.mu.Lock()
		recs := r.waiting
		r.waiting = nil
		if len(recs) == 0 {
			t.releasing = false
			wake := r.events > 0
			t.mu.Unlock()
			if wake {
				select {
				case t.wake <- struct{}{}:
				default:
				}
			}
			return
		}
		t.mu.Unlock()
		for _, rec := range recs {
			t.p.enqueueNow(rec)
		}
	}
}

// writePosition produces the position record of a range ending with last
// into the open transaction, retrying like a lane.
func (t *transactions) writePosition(last *replication.WALEvent) error {
	p := t.p
	msg := &kafka.Message{Key: t.cfg.PositionKey, Value: t.cfg.Position(last, t.positionsCount), Time: time.Now()}
	var buf []byte
	var failing time.Time
	for attempt := 1; ; attempt++ {
		st, err := p.producer.Stamp(p.ctx, t.seq)
		if err == nil {
			buf, err = p.deliver(t.seq, st, kafkaproduce.Batch{Topic: t.positions.Topic, Partition: t.positions.Partition, Leader: -1, Last: true},
				[]*kafka.Message{msg}, buf)
		}
		if err == nil {
			return nil
		}
		if p.ctx.Err() != nil {
			return p.ctx.Err()
		}
		if te := t.failure("Produce", err); te != nil {
			return te
		}
		if class, reason := classify(err); class != Transient {
			return fatalError(t.positions.Topic, t.positions.Partition, reason, err)
		}
		if failing.IsZero() {
			failing = time.Now()
		} else if time.Since(failing) > t.cfg.Timeout {
			return &TransactionError{Op: "Produce", Err: fmt.Errorf("position record not written within the transaction timeout: %w", err)}
		}
		d := p.beforeRetry(attempt, err, failing)
		p.log.LogAttrs(context.Background(), retryLevel(attempt), "position record not written, retrying", slog.String("stage", "transaction"),
			slog.String("topic", t.positions.Topic), slog.Int("partition", t.positions.Partition), slog.Int("attempt", attempt),
			slog.Duration("backoff", d), slog.Any("error", err))
		if !p.sleep(d) {
			return p.ctx.Err()
		}
	}
}

// end ends the open transaction (EndTxn), retrying while the coordinator
// moves or loads: a retried commit the coordinator already completed is
// answered with success.
func (t *transactions) end(commit bool) error {
	p := t.p
	op := "EndTxn(commit)"
	if !commit {
		op = "EndTxn(abort)"
	}
	var failing time.Time
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(p.ctx, p.cfg.WriteTimeout)
		err := t.coord.End(ctx, p.producer.ID(), commit)
		cancel()
		if err == nil {
			return nil
		}
		if p.ctx.Err() != nil {
			return p.ctx.Err()
		}
		if te := t.failure(op, err); te != nil {
			if te.Fenced {
				p.m.ProducerFenced()
			}
			return te
		}
		if !coordinatorRetry(err) {
			return &TransactionError{Op: op, Err: err}
		}
		if failing.IsZero() {
			failing = time.Now()
		} else if time.Since(failing) > t.cfg.Timeout {
			return &TransactionError{Op: op, Err: fmt.Errorf("coordinator unavailable for the transaction timeout: %w", err)}
		}
		d := p.beforeRetry(attempt, err, failing)
		p.log.LogAttrs(context.Background(), retryLevel(attempt), "transaction not ended, retrying", slog.String("stage", "transaction"),
			slog.String("op", op), slog.Int("attempt", attempt), slog.Duration("backoff", d), slog.Any("error", err))
		if !p.sleep(d) {
			return p.ctx.Err()
		}
	}
}

// abandon aborts the open transaction when the publisher closes with
// events in it, so read_committed consumers are not held at its first
// offset until the coordinator's timeout (or the next leader's
// InitProducerId). Best effort: a fenced or unreachable producer leaves
// that to the coordinator.
//
// Not when a produce request of the publisher ended unanswered (Close
// cancels those in flight): the broker may still append its batch after
// the abort's markers, and under the same epoch a broker without KIP-890's
// partition verification (before 3.6, or with it disabled) takes that
// batch as the start of a new transaction nobody ends. Its partition's
// last stable offset then sticks until the coordinator's timeout, and a
// later commit of the same producer there would make the batch visible
// out of order. The next InitProducerId (the next stream start, on this
// relay or another) aborts with a bumped epoch instead, which the late
// batch cannot pass.
func (t *transactions) abandon() {
	t.mu.Lock()
	pending := t.open.events > 0
	t.mu.Unlock()
	if !pending {
		t.p.log.Debug("no open transaction to abort on close: nothing was produced since the last commit", slog.String("stage", "transaction"))
		return
	}
	if t.p.sink.Unanswered() {
		t.p.log.Info("open transaction not aborted on close: a produce request ended unanswered and could still be appended after an abort; the next leader's InitProducerId aborts it, or the coordinator after the transaction timeout",
			slog.String("stage", "transaction"))
		return
	}
	pid := t.p.producer.ID()
	if pid.ID < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := t.coord.End(ctx, pid, false)
	t.p.m.TransactionAborted()
	if te := t.failure("EndTxn(abort)", err); te != nil && te.Fenced {
		t.p.m.ProducerFenced()
	}
	if err != nil {
		t.p.log.Info("open transaction not aborted on close; the coordinator aborts it after the transaction timeout, or the next leader at once",
			slog.String("stage", "transaction"), slog.Any("error", err))
		return
	}
	t.p.log.Info("open transaction aborted on close", slog.String("stage", "transaction"))
}
