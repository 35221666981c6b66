package publisher

// This file holds the lane: one goroutine per partition of a topic that
// sends the partition's records to Kafka one batch at a time, so a later
// batch never overtakes an earlier one.
//
// Started by its topic's router (router.startLane, a startstop service:
// lane.loop) when the router routes a record to a partition that has
// no lane: the first, or the first after the router removed an idle one.
// It stops when its context ends: the publisher's (Close) or its own,
// which its router's Stop of loop cancels: the sweep, once the lane has
// been idle with nothing outstanding, or the router's exit (stopLanes).
// Either Stop waits for the lane. It also stops when it fails the
// publisher (p.fail on a fatal error) or a park or dead-letter cannot
// complete (park, settle).
//
// Only the lane's goroutine touches records and lastErr. startLane sets
// the other fields before the goroutine starts, except lastSweep, which
// only the router touches, and two atomics the lane shares with the
// router: leader, which the router stores and the lane reads for each
// batch, and outstanding, which the router adds to when it routes a
// record here and record.done takes off once the lane has acknowledged,
// parked or dead-lettered it.
//
// It reads its queue q, which only the router pushes to, until its
// context ends. It hands each batch to the sink (Sink.Produce: a
// send to its collector, then a wait for the batch's answer), so it has
// at most one batch in flight and does not touch its records slice while
// the sink holds it. It calls the Acker of each record it takes care
// of, DeadLetters for records to park or dead-letter, and p.fail
// (Publisher.fatal) on a fatal error.

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

// lane writes one partition's records, one batch at a time.
type lane struct {
	p         *Publisher
	topic     string
	partition int
	// loop runs the lane's goroutine (run), under the publisher's
	// context; the router stops it (evicting the lane, which it does
	// only with nothing outstanding, or on its own way out).
	loop *startstop.Service
	// outstanding counts records routed to the lane and not yet taken
	// care of (record.done).
	outstanding atomic.Int64
	// lastSweep is the router's sweep count when it last routed a record
	// here; only the router touches it.
	lastSweep uint64
	// leader is the partition leader's broker id (-1 unknown), kept
	// current by the router; the sink groups batches by it.
	leader atomic.Int32
	q      *queue
	// seq is the partition's sequence state with idempotence, nil
	// without.
	seq     *kafkaproduce.Seq
	msgs    []*kafka.Message
	buf     []byte
	lastErr error
}

// produce sends the lane's records as one partition batch of a combined
// produce request (see kafkaproduce.Sink) and waits for acks=all. The lane has
// already formed the batch, so it goes straight to the protocol: kafka-go's
// Writer would re-batch it, wait its BatchTimeout on a partial batch and
// allocate a full-size batch buffer for every call. st stamps the batch
// (kafkaproduce.NoStamp without idempotence).
func (l *lane) produce(recs []*outgoing, st kafkaproduce.Stamp) error {
	// Encoded per attempt: a new producer id changes the stamp. The buffer
	// is the lane's; the sink is done with it when produce returns.
	l.msgs = l.msgs[:0]
	size := 0
	for _, rec := range recs {
		l.msgs = append(l.msgs, &rec.msg)
		size += rec.size
	}
	var err error
	l.buf, err = l.p.deliver(l.seq, st, kafkaproduce.Batch{Topic: l.topic, Partition: l.partition, Leader: int(l.leader.Load()), Bytes: size}, l.msgs, l.buf)
	clear(l.msgs)
	return err
}

// deliver is the send step of every partition batch, a lane's or the
// committer's position record: it encodes msgs under st into buf (reused,
// and returned), hands the batch to the sink and waits for acks=all. A
// batch the broker had stored before (DUPLICATE_SEQUENCE_NUMBER: a retry
// of one whose answer was lost) counts as delivered; a delivered batch
// advances seq (nil without idempotence).
func (p *Publisher) deliver(seq *kafkaproduce.Seq, st kafkaproduce.Stamp, b kafkaproduce.Batch, msgs []*kafka.Message, buf []byte) ([]byte, error) {
	b.Records = kafkaproduce.AppendBatch(buf[:0], msgs, st, time.Now())
	if b.Bytes == 0 {
		b.Bytes = len(b.Records) // a lane counts its records' sizes instead
	}
	err := p.sink.Produce(&b)
	if err != nil && seq != nil && errors.Is(err, kafka.DuplicateSequenceNumber) {
		err = nil // the broker has stored this very batch before
	}
	if err == nil && seq != nil {
		p.producer.Acked(seq, st, len(msgs))
	}
	return b.Records, err
}

func (l *lane) run(ctx context.Context) {
	p := l.p
	var batch, send []*outgoing
	for {
		batch = l.q.take(ctx, p.cfg.MaxBatch, p.cfg.MaxBatchBytes, batch)
		if batch == nil {
			return
		}
		// Events whose aggregate got quarantined after they were routed
		// (a poison event earlier in this lane) are parked, not sent.
		send = send[:0]
		for _, rec := range batch {
			held, ok := p.park(rec)
			if !ok {
				return
			}
			if !held {
				send = append(send, rec)
			}
		}
		if len(send) > 0 && !l.write(send) {
			return
		}
		clear(batch)
	}
}

// write delivers records (one partition batch) and acknowledges them. It
// returns false when the publisher is closing or failed.
func (l *lane) write(recs []*outgoing) bool {
	switch l.send(recs) {
	case sent:
		l.acked(recs)
		return true
	case closing:
		return false
	}
	// A permanent failure of a batch: find the poison records by sending
	// one at a time, in order, so everything before a poison record is
	// delivered and everything of its aggregate after it is parked.
	p := l.p
	for _, rec := range recs {
		held, ok := p.park(rec)
		if !ok {
			return false
		}
		if held {
			continue
		}
		switch l.send([]*outgoing{rec}) {
		case sent:
			l.acked([]*outgoing{rec})
		case closing:
			return false
		case rejected:
			_, reason := classify(l.lastErr)
			if !p.settle(rec, reason, l.lastErr) {
				return false
			}
		}
	}
	return true
}

// sendResult is the outcome of lane.send.
type sendResult int

const (
	sent sendResult = iota
	rejected
	closing
)

// send writes one partition batch, retrying transient failures with
// backoff until it is acknowledged, rejected for good, or the publisher
// closes. Every attempt of the batch carries the same producer stamp
// unless the broker refused the producer id, so the broker discards an
// attempt that repeats one it already stored.
func (l *lane) send(recs []*outgoing) sendResult {
	p := l.p
	var vanished time.Time // first UNKNOWN_TOPIC_OR_PARTITION of this batch
	var failing time.Time  // first failure of this batch
	for attempt := 1; ; attempt++ {
		st, err := l.stamp()
		if err == nil {
			p.m.ProduceRequest()
			err = l.produce(recs, st)
		}
		if err == nil {
			if attempt > 1 {
				p.log.Info("partition batch delivered after retries", slog.String("stage", "publish"), slog.String("topic", l.topic), slog.Int("partition", l.partition), slog.Int("attempt", attempt), slog.Duration("after", time.Since(failing)))
			}
			return sent
		}
		if p.ctx.Err() != nil {
			return closing
		}
		if failing.IsZero() {
			failing = time.Now()
		}
		if p.txn != nil {
			if te := p.txn.failure("Produce", err); te != nil {
				// The open transaction is lost: nothing of it was
				// acknowledged, the caller restarts from its position.
				if te.Fenced {
					p.m.ProducerFenced()
				}
				first := recs[0].ev
				p.log.Warn("kafka transaction failed; stopping the stream to restart from the last committed position", slog.String("stage", "transaction"),
					slog.String("topic", l.topic), slog.Int("partition", l.partition), slog.Int("attempt", attempt), slog.Bool("fenced", te.Fenced), slog.Bool("timed_out", te.TimedOut),
					slog.String("event_id", first.EventID), slog.String("aggregate_id", first.AggregateID), slog.String("event_type", first.EventType), slog.Any("error", err))
				p.fail(te)
				return closing
			}
		}
		class, reason := classify(err)
		renew := l.seq != nil && producerIDRefused(err)
		if renew {
			// The broker lost or refuses the producer id's state for
			// this partition: take a new id (see producer).
			class = Transient
			p.producer.Reset(st)
		}
		if class == Transient && lingering(err) {
			// Unknown partition: a metadata lag heals, a deleted one never.
			if vanished.IsZero() {
				vanished = time.Now()
			} else if time.Since(vanished) >= p.cfg.UnknownTopicTimeout {
				class = Fatal
			}
		}
		p.m.PublishError(reason, string(class))
		first := recs[0].ev
		p.cfg.recordFailure(Failure{At: time.Now(), Class: class, Reason: reason, Topic: l.topic, Partition: l.partition,
			Attempt: attempt, EventID: first.EventID, AggregateID: first.AggregateID, EventType: first.EventType, Err: err})
		level := retryLevel(attempt)
		if errors.Is(err, kafka.ConcurrentTransactions) && attempt%10 != 0 {
			// Expected right after a commit, gone within milliseconds.
			level = slog.LevelDebug
		}
		if class != Transient || renew {
			level = max(level, slog.LevelWarn)
		}
		if class != Transient {
			level = slog.LevelError
		}
		attrs := []slog.Attr{slog.String("stage", "publish"), slog.String("topic", l.topic), slog.Int("partition", l.partition),
			slog.Int("attempt", attempt), slog.Int("batch", len(recs)), slog.String("class", string(class)), slog.String("reason", reason),
			slog.String("event_id", first.EventID), slog.String("aggregate_id", first.AggregateID), slog.String("event_type", first.EventType),
			slog.Any("error", err)}
		if class == Fatal {
			p.log.LogAttrs(context.Background(), level, "publish failed for a reason no retry can fix; stopping with the slot position held", attrs...)
			p.fail(fatalError(l.topic, l.partition, reason, err))
			return closing
		}
		if class == Permanent {
			p.log.LogAttrs(context.Background(), level, "publish rejected permanently", attrs...)
			l.lastErr = err
			return rejected
		}
		d := p.beforeRetry(attempt, err, failing)
		msg := "publish failed, retrying"
		if renew {
			msg = "broker refused the producer id; retrying the batch under a new one"
		}
		p.log.LogAttrs(context.Background(), level, msg, append(attrs, slog.Duration("backoff", d))...)
		if !p.sleep(d) {
			return closing
		}
	}
}

// stamp returns the producer stamp of the lane's next attempt: kafkaproduce.NoStamp
// without idempotence.
func (l *lane) stamp() (kafkaproduce.Stamp, error) {
	if l.seq == nil {
		return kafkaproduce.NoStamp, nil
	}
	return l.p.producer.Stamp(l.p.ctx, l.seq)
}

func (l *lane) acked(recs []*outgoing) {
	p := l.p
	now := time.Now()
	for _, rec := range recs {
		rec.done()
		p.m.CommitToAck(now.Sub(rec.commit))
	}
	p.m.BatchPublished(l.topic, len(recs))
}
