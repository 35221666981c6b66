package publisher

// This file holds the Publisher, which has no goroutine of its own: its
// methods run on their callers' goroutines. Publish runs on the caller's,
// which in the relay's stream is the replication goroutine (sink.Insert,
// one event at a time in stream order); forward runs on the quarantine's.
//
// Every goroutine of the publisher is a startstop service, started under
// ctx and stopped (which waits for it) by its owner. New starts the
// sink's (kafkaproduce.Sink.Start) and, with DeadLetters, the
// quarantine's (quarantine.run); Begin starts the committer's
// (transactions.run); enqueue, from Publish, forward or the committer,
// starts a topic's router, and routers start and stop their lanes. Close
// cancels ctx, stops the committer, the quarantine and every router
// (each stops its lanes on the way out), then the sink, and only then
// releases the transport's idle connections: no goroutine of the
// publisher outlives Close. A router also ends when it retires, a lane
// when its router stops it, and both when they fail the publisher.
//
// The Publisher's own state is small: routers, retiring and closed,
// guarded by mu (enqueue adds a router unless closed; retired moves one
// to retiring, called by the retiring router or by enqueue when it finds
// that router's queue closed; enqueue forgets the retiring ones that have
// returned, Close stops all of them); lanes, an atomic
// count the routers keep and the sink reads; fatal, a channel of one
// that fail sends on without blocking, from the quarantine, the routers and
// the lanes, and that the caller reads (Fatal). The rest (cfg, log, m,
// client, sink, quarantine, ctx, cfgErr) is set by newPublisher and only
// read afterwards. The helpers after the Publisher's methods (park,
// settle, retryLevel) are shared by the routers, the lanes and the quarantine.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Acker is told once an event is taken care of: acknowledged by Kafka, or
// durably dead-lettered or parked.
type Acker interface {
	Ack(bytes int)
}

// DeadLetters is where events go that must not or cannot be published:
// a poison event becomes a dead letter and quarantines its aggregate, and
// later events of a quarantined aggregate are parked (the relay's
// implementation keeps them in the dead-letter table). Hold and Poison
// commit their row before returning, so the event may be acknowledged
// afterwards and the slot confirmed past it.
type DeadLetters interface {
	// Quarantines reports, from memory and without waiting, whether ev's
	// aggregate is quarantined. Events it reports go to Hold off the
	// replication goroutine.
	Quarantines(ev *replication.WALEvent) bool
	// Hold parks ev if its aggregate is quarantined before it and
	// reports whether ev is taken care of. It may wait for an operator's
	// dlq retry of the aggregate.
	Hold(ctx context.Context, ev *replication.WALEvent, topic string) (bool, error)
	// Poison dead-letters ev and quarantines its aggregate; an error
	// (such as the halt policy's) stops the relay.
	Poison(ctx context.Context, ev *replication.WALEvent, topic, class, reason string) error
}

// Metrics receives the publisher's measurements. The relay implements it
// with Prometheus collectors (outbox_relay_publish_*); nil measures
// nothing. Methods are called from the publishing goroutines and must not
// block.
type Metrics interface {
	// ProduceRequest counts one produce request sent to a partition leader.
	ProduceRequest()
	// PublishError counts a failed publish attempt by reason (a short
	// label such as "timeout" or "message_too_large") and class
	// (transient, permanent or fatal: see Class).
	PublishError(reason, class string)
	// BatchPublished counts events of topic acknowledged by Kafka in one
	// produce request.
	BatchPublished(topic string, events int)
	// CommitToAck observes, per event, the time from its transaction's
	// commit to Kafka's acknowledgement.
	CommitToAck(d time.Duration)
	// PartitionChange counts a switch of topic to a new partition count.
	PartitionChange(topic string)
	// TransactionCommitted observes an exactly-once transaction's commit:
	// open is from its first event to the commit's end, commit the
	// commit alone (waiting for its last records, the position record,
	// EndTxn), events how many it covered.
	TransactionCommitted(open, commit time.Duration, events int)
	// TransactionAborted counts a transaction abandoned with events in it.
	TransactionAborted()
	// ProducerFenced counts a refusal because a newer producer with the
	// same transactional id took over.
	ProducerFenced()
	// MetadataRefreshFailed counts a metadata question of the
	// publisher's own (a topic's partitions and leaders, the positions
	// topic's partition count) that failed, by reason (as PublishError's:
	// "timeout", "network", "unknown_topic_or_partition", ...): the
	// layout known before, if any, stays in use meanwhile.
	MetadataRefreshFailed(reason string)
}

type nopMetrics struct{}

func (nopMetrics) ProduceRequest()                                        {}
func (nopMetrics) PublishError(string, string)                            {}
func (nopMetrics) BatchPublished(string, int)                             {}
func (nopMetrics) CommitToAck(time.Duration)                              {}
func (nopMetrics) PartitionChange(string)                                 {}
func (nopMetrics) TransactionCommitted(time.Duration, time.Duration, int) {}
func (nopMetrics) TransactionAborted()                                    {}
func (nopMetrics) ProducerFenced()                                        {}
func (nopMetrics) MetadataRefreshFailed(string)                           {}

// outgoing is one event on its way to Kafka.
type outgoing struct {
	ev     *replication.WALEvent
	msg    kafka.Message
	size   int
	ack    Acker
	commit time.Time
	// out is the outstanding count of the lane the record was routed to
	// (nil before routing); see done.
	out *atomic.Int64
	// seg is the segment of the exactly-once range the record belongs
	// to (nil otherwise).
	seg *segment
}

// done reports rec as taken care of (acknowledged by Kafka, parked or
// dead-lettered) and then takes it off its lane's outstanding count. That
// order matters: a router that sees the count at zero (to switch partition
// counts, or to evict the lane) relies on the Acks having happened.
func (rec *outgoing) done() {
	rec.ack.Ack(rec.size)
	if rec.out != nil {
		rec.out.Add(-1)
	}
}

// Publisher routes events to per-partition lanes. Publish never blocks;
// the caller bounds what is in flight.
type Publisher struct {
	cfg config
	log *slog.Logger
	m   Metrics
	// client and the sink carry metadata and produce requests over
	// one transport: one connection pool per broker, shared by every
	// lane. closeIdle releases its idle connections on Close.
	closeIdle  func()
	client     *kafka.Client
	sink       *kafkaproduce.Sink
	quarantine *quarantine
	// topics is the transport whose metadata cache covers the topics
	// written to (nil when tests pass their own RoundTripper).
	topics *topicTransport
	// producer is the idempotent producer's id and sequences; nil
	// with Config.NoIdempotence and no transactions.
	producer *kafkaproduce.Producer
	// txn is the exactly-once state; nil without WithTransactions.
	txn   *transactions
	lanes atomic.Int64 // lanes started, over all topics
	// refreshed is when refreshMetadata last closed the transport's
	// pools (Unix nanoseconds).
	refreshed atomic.Int64
	ctx       context.Context
	cancel    context.CancelFunc
	fatal     chan error
	mu        sync.Mutex
	routers   map[string]*router
	// retiring holds the routers that retired and whose goroutine may
	// not have returned yet: Close stops them too. closed is set by
	// Close: no router starts after it.
	retiring map[*router]struct{}
	closed   bool
	// enc encodes the records (nil when cfg.Record is invalid); cfgErr
	// is cfg.Record's validation error, returned by Publish.
	enc    *record.Encoder
	cfgErr error
}

// New returns a Publisher of cfg that writes to brokers, its wiring,
// logs and metrics where opts say (WithTransport, WithDeadLetters,
// WithTransactions, WithReservedTopics, WithLogger, WithMetrics); it does
// not contact Kafka until used. An invalid cfg.TopicTemplate or
// cfg.Record fails every Publish.
func New(brokers []string, cfg Config, opts ...Option) *Publisher {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	c, err := newConfig(brokers, cfg, o)
	var own []string
	if c.Transactions != nil {
		own = append(own, c.Transactions.PositionsTopic)
	}
	tt := newTopicTransport(c.Transport, own...)
	p := newPublisher(c, o.logger, o.metrics, tt, tt.CloseIdleConnections)
	if err != nil && p.cfgErr == nil {
		p.cfgErr = fmt.Errorf("Publish.TopicTemplate: %w", err)
	}
	return p
}

// newPublisher returns a Publisher whose metadata and produce requests go
// through rt (tests pass a fake broker); closeIdle, if set, runs on Close.
func newPublisher(cfg config, log *slog.Logger, m Metrics, rt kafka.RoundTripper, closeIdle func()) *Publisher {
	if m == nil {
		m = nopMetrics{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	addr := kafka.TCP(cfg.Brokers...)
	ctx, cancel := context.WithCancel(context.Background())
	enc, cfgErr := record.NewEncoder(cfg.Record)
	if cfgErr == nil && cfg.Record.Format.Registry() && cfg.Schemas == nil {
		cfgErr = fmt.Errorf("Publish.Record.Format %s: the publisher has no schema registry to encode it with (WithSchemas)", cfg.Record.Format)
	}
	p := &Publisher{
		cfg: cfg, log: log, m: m, ctx: ctx, cancel: cancel, enc: enc, cfgErr: cfgErr,
		fatal:     make(chan error, 1),
		routers:   make(map[string]*router),
		retiring:  make(map[*router]struct{}),
		closeIdle: closeIdle,
		client:    &kafka.Client{Addr: addr, Transport: rt, Timeout: 10 * time.Second},
	}
	p.topics, _ = rt.(*topicTransport)
	if cfg.Idempotent || cfg.Transactions != nil {
		p.producer = kafkaproduce.NewProducer(rt, addr, cfg.Transactions != nil)
	}
	p.sink = kafkaproduce.NewSink(ctx, rt, addr, cfg.WriteTimeout, cfg.Linger, func() int { return int(p.lanes.Load()) })
	if cfg.Transactions != nil {
		p.txn = newTransactions(p, *cfg.Transactions)
		p.sink.TransactionalID, p.sink.BeforeSend = cfg.Transactions.ID, p.txn.addPartitions
	}
	p.sink.Start()
	p.quarantine = newQuarantine(p)
	if cfg.DeadLetters != nil {
		p.quarantine.loop.Start(ctx)
	}
	return p
}

// Ping checks that a broker answers a metadata request.
func (p *Publisher) Ping(ctx context.Context) error {
	_, err := p.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
	if err != nil {
		return fmt.Errorf("kafka %s: %w", strings.Join(p.cfg.Brokers, ","), err)
	}
	return nil
}

// Fatal delivers a permanent failure; the relay must stop with the slot
// position held.
func (p *Publisher) Fatal() <-chan error { return p.fatal }

// Publish queues ev for its topic; ack is called once ev is taken care of.
// An event that can never become a record is handed to DeadLetters
// here, synchronously, in stream order. An event of a quarantined
// aggregate goes to the quarantine, which parks it without making the
// replication goroutine wait for the aggregate's lock. The error is for
// failures the relay must stop on.
func (p *Publisher) Publish(ctx context.Context, ev *replication.WALEvent, ack Acker) error {
	if p.cfgErr != nil {
		return p.cfgErr
	}
	if p.txn != nil && !p.txn.begun.Load() {
		return errNotStarted
	}
	rec := &outgoing{ev: ev, ack: ack, commit: ev.CommitTime}
	rec.msg.Topic = p.cfg.Template.Render(ev.AggregateType, ev.EventType)
	quarantined := p.cfg.DeadLetters != nil && p.quarantine.route(rec)
	if p.txn != nil {
		rec.seg = p.txn.enter(rec, ev.Size(), quarantined)
	}
	if quarantined {
		p.quarantine.push(rec)
		return nil
	}
	msg, reason, err := p.message(ctx, rec.msg.Topic, ev)
	if err != nil {
		var su *SchemaUnavailableError
		if errors.As(err, &su) { // transient: the relay restarts the stream after a backoff
			p.m.PublishError(reason, string(Transient))
			return err
		}
		return p.poison(ctx, ev, rec.msg.Topic, reason, err, rec.ack)
	}
	rec.msg, rec.size = msg, messageSize(&msg)
	p.enqueue(rec)
	return nil
}

// forward builds the record of an event the quarantine released and queues it
// at its router, or dead-letters it when it cannot become a record. It
// returns false when the publisher is closing or failed.
func (p *Publisher) forward(rec *outgoing) bool {
	msg, reason, err, ok := p.forwardable(rec)
	if !ok {
		return false
	}
	if err != nil {
		p.m.PublishError(reason, string(Permanent))
		return p.settle(rec, reason, err)
	}
	rec.msg, rec.size = msg, messageSize(&msg)
	p.enqueue(rec)
	return true
}

// enqueue hands rec to its topic's router, unless it belongs to an
// exactly-once range that is not open yet (see transactions.wait).
func (p *Publisher) enqueue(rec *outgoing) {
	if p.txn != nil && p.txn.wait(rec, rec.seg) {
		return
	}
	p.enqueueNow(rec)
}

// enqueueNow hands rec to its topic's router, starting the router if
// needed. Once Close began, rec is abandoned instead, like every record
// not yet acknowledged then.
func (p *Publisher) enqueueNow(rec *outgoing) {
	topic := rec.msg.Topic
	for {
		p.mu.Lock()
		r := p.routers[topic]
		if r == nil {
			if p.closed {
				p.mu.Unlock()
				return
			}
			p.forgetRetired()
			r = &router{p: p, topic: topic, q: newQueue(), lanes: map[int]*lane{}}
			r.loop = startstop.New(r.run)
			p.routers[topic] = r
			r.loop.Start(p.ctx)
		}
		p.mu.Unlock()
		if r.q.push(rec) {
			return
		}
		// r retired (idle) between the lookup and the push, with
		// nothing of the topic left in flight: start a new one.
		p.retired(r)
	}
}

// retired removes r from the routers once its queue is closed; a later
// Publish of its topic starts a new router. r's goroutine may still be
// on its way out: it stays in retiring until it has returned, so Close
// waits for it.
func (p *Publisher) retired(r *router) {
	p.mu.Lock()
	if p.routers[r.topic] == r {
		delete(p.routers, r.topic)
	}
	p.retiring[r] = struct{}{}
	p.mu.Unlock()
}

// forgetRetired drops the retiring routers whose goroutine has returned
// (or never ran: tests plant routers without one), so retiring stays
// small. It is called with mu held.
func (p *Publisher) forgetRetired() {
	for r := range p.retiring {
		if r.loop == nil {
			delete(p.retiring, r)
			continue
		}
		select {
		case <-r.loop.Done():
			delete(p.retiring, r)
		default:
		}
	}
}

// message builds ev's record on topic (record.Encoder.Encode) and checks
// its size. An error is an *EventError, with the reason of the dead
// letter and of the publish_errors metric.
func (p *Publisher) message(ctx context.Context, topic string, ev *replication.WALEvent) (kafka.Message, string, error) {
	var msg kafka.Message
	var err error
	if p.cfg.Record.Format.Registry() {
		var reason string
		if msg, reason, err = p.registered(ctx, topic, ev); err != nil {
			return msg, reason, err
		}
	} else {
		msg, err = p.enc.Encode(topic, &ev.Row)
	}
	if err != nil {
		var ee *record.EncodeError
		if !errors.As(err, &ee) { // Encode fails with an EncodeError alone
			return kafka.Message{}, record.CodeInvalidRow, err
		}
		return kafka.Message{}, ee.Code, &EventError{EventID: ee.EventID, AggregateID: ee.AggregateID, Reason: ee.Reason}
	}
	if why := p.reservedTopic(topic); why != "" {
		return kafka.Message{}, ReasonReservedTopic, &EventError{EventID: ev.EventID, AggregateID: ev.AggregateID,
			Reason: fmt.Sprintf("topic %q %s: no event may be written there", topic, why)}
	}
	if n := messageSize(&msg); n > p.cfg.MaxBatchBytes {
		return kafka.Message{}, "message_too_large", &EventError{EventID: ev.EventID, AggregateID: ev.AggregateID,
			Reason: fmt.Sprintf("record of %d bytes exceeds Publish.MaxBatchBytes %d", n, p.cfg.MaxBatchBytes)}
	}
	return msg, "", nil
}

// ReasonReservedTopic is the reason of an event whose topic is reserved
// (WithReservedTopics, or a name that begins with "__").
const ReasonReservedTopic = "reserved_topic"

// reservedTopic says why topic is reserved ("" when it is not).
func (p *Publisher) reservedTopic(topic string) string {
	if strings.HasPrefix(topic, "__") {
		return `begins with "__", the prefix of Kafka's internal topics and of the relay's positions topic`
	}
	if slices.Contains(p.cfg.ReservedTopics, topic) {
		return "is the relay's positions topic"
	}
	return ""
}

// poison hands ev to DeadLetters, or fails without one.
func (p *Publisher) poison(ctx context.Context, ev *replication.WALEvent, topic, reason string, cause error, ack Acker) error {
	p.m.PublishError(reason, string(Permanent))
	q := p.cfg.DeadLetters
	if q == nil {
		return cause
	}
	if err := q.Poison(ctx, ev, topic, string(Permanent), poisonReason(reason, cause)); err != nil {
		return err
	}
	ack.Ack(0)
	return nil
}

// poisonReason is the dead-letter reason: the metric's reason, then the
// cause (for an EventError its reason alone: the row names the event).
func poisonReason(reason string, cause error) string {
	var ee *EventError
	if errors.As(cause, &ee) {
		return reason + ": " + ee.Reason
	}
	return reason + ": " + cause.Error()
}

// durably retries a dead-letter operation while PostgreSQL is unavailable;
// giving up would lose the event, skipping it would reorder its aggregate.
// It returns false when the publisher is closing or the operation failed
// for good (then the publisher is failed).
func (p *Publisher) durably(what string, f func(ctx context.Context) error) bool {
	for attempt := 1; ; attempt++ {
		err := f(p.ctx)
		if err == nil {
			return true
		}
		if p.ctx.Err() != nil {
			return false
		}
		if poison.IsPermanent(err) { // a halt: retrying cannot help
			p.fail(err)
			return false
		}
		d := p.backoff(attempt)
		p.log.Warn("dead-letter write failed, retrying", slog.String("stage", "quarantine"), slog.String("op", what), slog.Int("attempt", attempt), slog.Duration("backoff", d), slog.Any("error", err))
		if !p.sleep(d) {
			return false
		}
	}
}

// Close stops all lanes; records not yet acknowledged are abandoned (the
// slot was not confirmed past them, so they will be redelivered). It
// returns once every goroutine of the publisher has.
func (p *Publisher) Close() error {
	p.cancel()
	p.mu.Lock()
	p.closed = true
	routers := make([]*startstop.Service, 0, len(p.routers)+len(p.retiring))
	for _, r := range p.routers {
		routers = append(routers, r.loop)
	}
	for r := range p.retiring {
		routers = append(routers, r.loop)
	}
	p.mu.Unlock()
	if p.txn != nil {
		p.txn.loop.Stop()
	}
	p.quarantine.loop.Stop()
	startstop.StopAll(routers...) // nil: a router a test planted without a goroutine
	p.sink.Stop()
	if p.txn != nil {
		p.txn.abandon()
	}
	if p.closeIdle != nil {
		p.closeIdle()
	}
	return nil
}

func (p *Publisher) fail(err error) {
	select {
	case p.fatal <- err:
	default:
	}
}

// park asks DeadLetters whether rec must be parked, and parks it, retrying while
// PostgreSQL is unavailable. ok is false when the publisher stops.
func (p *Publisher) park(rec *outgoing) (parked, ok bool) {
	q := p.cfg.DeadLetters
	if q == nil {
		return false, true
	}
	ok = p.durably("park", func(ctx context.Context) error {
		var err error
		parked, err = q.Hold(ctx, rec.ev, rec.msg.Topic)
		return err
	})
	if ok && parked {
		rec.done()
	}
	return parked, ok
}

// settle dead-letters a record Kafka rejected for good (or fails the
// publisher without DeadLetters) and acknowledges it.
func (p *Publisher) settle(rec *outgoing, reason string, cause error) bool {
	q := p.cfg.DeadLetters
	if q == nil {
		p.fail(fmt.Errorf("publish to %s (event %s): %s: %w", rec.msg.Topic, rec.ev.EventID, reason, cause))
		return false
	}
	ok := p.durably("dead-letter", func(ctx context.Context) error {
		return q.Poison(ctx, rec.ev, rec.msg.Topic, string(Permanent), poisonReason(reason, cause))
	})
	if ok {
		rec.done()
	}
	return ok
}
