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
// (dlq retry) that must know each event's outcome before the next. It
// writes as a Publisher of the same Config and options would - the record
// format, the partitioning (acks=all, murmur2 on aggregate_id), the
// reserved topics - one event at a time, but without the idempotent
// producer (kafka-go's Writer has none): a write retried after a timeout
// may store the event twice, which consumers deduplicate.
type SyncWriter struct {
	cfg config
	err error // an invalid TopicTemplate: every Write fails
	w   *kafka.Writer
}

// NewSyncWriter returns a writer of cfg to brokers, wired by opts as New's
// publishers are (WithTransport, WithReservedTopics; the others do not
// apply to single writes).
func NewSyncWriter(brokers []string, cfg Config, opts ...Option) *SyncWriter {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	c, err := newConfig(brokers, cfg, o)
	return &SyncWriter{cfg: c, err: err, w: &kafka.Writer{
		Addr:         kafka.TCP(c.Brokers...),
		Transport:    c.Transport,
		Balancer:     aggregateBalancer(c.Record),
		RequiredAcks: kafka.RequireAll,
		BatchSize:    1,
		BatchBytes:   int64(c.MaxBatchBytes),
		BatchTimeout: time.Millisecond,
		WriteTimeout: c.WriteTimeout,
		MaxAttempts:  1,
		// Topics are never created here: a retry goes where the relay would.
		AllowAutoTopicCreation: false,
	}}
}

// Write publishes ev, retrying transient failures a few times. The error
// of a failed write says whether it is permanent.
func (s *SyncWriter) Write(ctx context.Context, ev *replication.WALEvent) error {
	if s.err != nil {
		return fmt.Errorf("Publish.TopicTemplate: %w", s.err)
	}
	enc, err := record.NewEncoder(s.cfg.Record)
	if err != nil {
		return err
	}
	if s.cfg.Record.Format.Registry() && s.cfg.Schemas == nil {
		return fmt.Errorf("Publish.Record.Format %s: the writer has no schema registry to encode it with (WithSchemas)", s.cfg.Record.Format)
	}
	topic := s.cfg.Template.Render(ev.AggregateType, ev.EventType)
	p := &Publisher{cfg: s.cfg, enc: enc}
	msg, reason, err := p.message(ctx, topic, ev)
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

// aggregateBalancer is murmur2 over the aggregate_id, as the router
// partitions: the record key itself, unless the key is framed
// (record.Config.KeySchema), whose aggregate_id it decodes.
func aggregateBalancer(rc record.Config) kafka.Balancer {
	var murmur kafka.Murmur2Balancer
	if !rc.KeySchema {
		return murmur
	}
	return kafka.BalancerFunc(func(m kafka.Message, partitions ...int) int {
		if id, _, err := record.DecodeKey(m.Key, rc.Format); err == nil {
			m.Key = []byte(id)
		}
		return murmur.Balance(m, partitions...)
	})
}
