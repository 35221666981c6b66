package relay

// This file holds the sink, which connects the replication stream to the
// tracker and the publisher. It has no goroutine of its own: the stream
// calls Begin, Insert and Commit on the replication goroutine (the one in
// Stream.Run, drive's caller's), one transaction at a time in stream
// order, and only that goroutine touches the sink's fields. Publish hands
// each event on without blocking; the Ackers it passes (sizedAck, or a
// span's around it) are called later from the publisher's goroutines and
// touch only the tracker, which is safe for that.

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
)

// sink connects the stream to the tracker and the publisher.
type sink struct {
	ctx     context.Context
	tracker *checkpoint.Tracker
	pub     *publisher.Publisher
	m       *metrics.Relay
	tx      *checkpoint.Txn
	events  int // in tx
	// skip drops transactions a checkpoint says Kafka acknowledged already.
	skip *skipper
	// check holds back what skip drops by a position read from Kafka
	// until the stream found that position's event (nil: none to check).
	check *positionCheck
	// redo counts re-published events; decoded marks what was handed to
	// the publisher, published the events of tx that were.
	redo      *redelivery
	decoded   *decodedMark
	published int
	// spans starts a publish span per event (trace.go); nil: off.
	spans *publishSpans
}

func (s *sink) Begin(b replication.Begin) error {
	if err := s.check.begin(b); err != nil {
		return err
	}
	s.tx = s.tracker.BeginTx(b.CommitTime, b.Xid, b.FinalLSN)
	s.events, s.published = 0, 0
	s.skip.begin(b)
	s.redo.begin(b)
	return nil
}

func (s *sink) Insert(ev *replication.WALEvent) error {
	s.m.DecodedEvents.Inc()
	s.events++
	if err := s.check.event(ev); err != nil {
		return err
	}
	if s.skipped(ev.Ordinal) {
		return nil
	}
	size := ev.Size()
	seq := s.tracker.TrackOrdinal(s.tx, ev.Ordinal, size)
	var ack publisher.Acker = sizedAck{s.tx, seq, size}
	if s.spans != nil {
		ack = s.spans.start(ev, ack) // trace.go
	}
	if err := s.pub.Publish(s.ctx, ev, ack); err != nil {
		failSpan(ack, err)
		// Free its window share so the drain before stopping can finish;
		// it is not acknowledged, so neither the slot nor a checkpoint's
		// partial passes it.
		s.tx.Release(size)
		return err
	}
	s.published++
	s.redo.published()
	return nil
}

// skipped reports whether the event at ordinal of the current transaction
// is one a checkpoint shows Kafka acknowledged before the crash, so it is
// not published again. One the checkpoint's Partial names is settled in
// the tracker, so the Partial this run saves carries it too.
func (s *sink) skipped(ordinal int) bool {
	switch s.skip.skipping(ordinal) {
	case skipTransaction:
		return true
	case skipSettled:
		s.tracker.Settle(s.tx, ordinal)
		return true
	}
	return false
}

func (s *sink) Commit(c replication.Commit) error {
	if err := s.check.commit(s.events); err != nil {
		return err
	}
	if s.events > 0 {
		s.m.CommitToDecode.Observe(time.Since(s.tx.CommitTime).Seconds())
	}
	s.tracker.Commit(s.tx, c.EndLSN)
	if s.published > 0 {
		s.decoded.advance(c.EndLSN)
	}
	s.tx = nil
	return nil
}

// sizedAck releases an event's window share; the publisher's own size
// accounting differs (it counts Kafka framing), the tracker's must not.
// The Seq tells the tracker which event it is, for the acknowledged prefix.
type sizedAck struct {
	tx   *checkpoint.Txn
	seq  checkpoint.Seq
	size int
}

func (a sizedAck) Ack(int) { a.tx.AckSeq(a.seq, a.size) }
