package publisher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

// SyncWriter writes single events synchronously, for operator commands
// (dlq retry) that must know each event's outcome before the next.
type SyncWriter struct {
	cfg Config
	w   *kafka.Writer
}

// NewSyncWriter returns a writer with the relay's record format and
// partitioning (acks=all, murmur2 on aggregate_id).
func NewSyncWriter(cfg Config) *SyncWriter {
	cfg.defaults()
	return &SyncWriter{cfg: cfg, w: &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Transport:    cfg.Transport,
		Balancer:     &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll,
		BatchSize:    1,
		BatchBytes:   int64(cfg.MaxBatchBytes),
		BatchTimeout: time.Millisecond,
		WriteTimeout: cfg.WriteTimeout,
		MaxAttempts:  1,
		// Topics are never created here: a retry goes where the relay would.
		AllowAutoTopicCreation: false,
	}}
}

// Write publishes ev, retrying transient failures a few times. The error
// of a failed write says whether it is permanent.
func (s *SyncWriter) Write(ctx context.Context, ev *replication.WALEvent) error {
	enc, err := record.NewEncoder(s.cfg.Record)
	if err != nil {
		return err
	}
	topic := s.cfg.Template.Render(ev.AggregateType, ev.EventType)
	p := &Publisher{cfg: s.cfg, enc: enc}
	msg, reason, err := p.message(topic, ev)
	if err != nil {
		var ee *EventError
		if errors.As(err, &ee) {
			return fmt.Errorf("%s: %s", reason, ee.Reason)
		}
		return fmt.Errorf("%s: %w", reason, err)
	}
	var last error
	for attempt := 1; attempt <= 5; attempt++ {
		last = s.w.WriteMessages(ctx, msg)
		if last == nil {
			return nil
		}
		class, reason := classify(last)
		if class == Permanent || ctx.Err() != nil {
			return fmt.Errorf("%s (%s): %w", reason, class, last)
		}
		d := min(s.cfg.BackoffBase<<attempt, s.cfg.BackoffMax)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	_, reason = classify(last)
	return fmt.Errorf("%s (transient, gave up after 5 attempts): %w", reason, last)
}

// Close releases the writer's connections.
func (s *SyncWriter) Close() error { return s.w.Close() }
