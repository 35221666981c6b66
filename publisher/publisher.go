package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/backoff"
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
	Quarantines(ev *replication.Event) bool
	// Hold parks ev if its aggregate is quarantined before it and
	// reports whether ev is taken care of. It may wait for an operator's
	// dlq retry of the aggregate.
	Hold(ctx context.Context, ev *replication.Event, topic string) (bool, error)
	// Poison dead-letters ev and quarantines its aggregate; an error
	// (such as the halt policy's) stops the relay.
	Poison(ctx context.Context, ev *replication.Event, topic, class, reason string) error
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
}

type nopMetrics struct{}

func (nopMetrics) ProduceRequest()             {}
func (nopMetrics) PublishError(string, string) {}
func (nopMetrics) BatchPublished(string, int)  {}
func (nopMetrics) CommitToAck(time.Duration)   {}
func (nopMetrics) PartitionChange(string)      {}

// Config configures a Publisher.
type Config struct {
	Brokers  []string
	Template TopicTemplate
	// MaxBatch and MaxBatchBytes bound one partition batch (one produce
	// request). MaxBatchBytes must stay under the broker's
	// message.max.bytes, which applies to a whole record batch.
	MaxBatch      int
	MaxBatchBytes int
	// BackoffBase and BackoffMax bound the retry delay (full jitter).
	BackoffBase, BackoffMax time.Duration
	// CreateTopics creates missing topics with TopicPartitions and
	// TopicReplicationFactor (-1: the broker's default).
	CreateTopics           bool
	TopicPartitions        int
	TopicReplicationFactor int
	// WriteTimeout bounds one produce request.
	WriteTimeout time.Duration
	// Linger is how long a partition batch may wait for other
	// partitions' batches to share its produce request (see combiner);
	// 0 sends at once. It trades a few milliseconds of latency for far
	// fewer requests, which on a busy machine lowers the tail.
	Linger time.Duration
	// UnknownTopicTimeout is how long a missing topic (CreateTopics off)
	// is retried before its events count as poison.
	UnknownTopicTimeout time.Duration
	// MetadataRefresh is how often a topic's partition count is read
	// again, so added partitions get used (and a shrunk topic noticed).
	MetadataRefresh time.Duration
	// TopicIdleTimeout is how long a partition lane, and then a topic's
	// router, may stay idle (nothing queued, nothing awaiting Kafka)
	// before it is removed: topics come from event data, so without
	// eviction goroutines and queues would grow with every topic ever
	// seen.
	TopicIdleTimeout time.Duration
	// DeadLetters takes poison and parked events; nil stops the publisher
	// on the first poison event.
	DeadLetters DeadLetters
	// Transport carries every request to the brokers, so its TLS, SASL,
	// ClientID, DialTimeout and MetadataTTL apply to all of them
	// (kafka-go does not refresh metadata on NotLeaderForPartition, so
	// MetadataTTL bounds the stall after a leader change). Close releases
	// its idle connections. nil: PLAINTEXT, client ID "outbox-relay", a
	// 5 s dial timeout and a 1 s MetadataTTL. The relay builds it from
	// its one Kafka configuration (relay.KafkaConfig.Transport).
	Transport *kafka.Transport
	// LastFailure, if set, is told of every failed write and topic
	// lookup (the stall detector's cause); it may outlive the Publisher.
	LastFailure *LastFailure
	// RecordConfig is the record format (native by default) and the
	// tombstone switch; New checks it (RecordConfig.Validate) and an
	// invalid one fails every Publish.
	RecordConfig
}

func (c *Config) defaults() {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1000
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 900 << 10
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = 100 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 10 * time.Second
	}
	if c.TopicPartitions <= 0 {
		c.TopicPartitions = 6
	}
	if c.TopicReplicationFactor == 0 {
		c.TopicReplicationFactor = -1
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.Transport == nil {
		c.Transport = &kafka.Transport{ClientID: "outbox-relay", DialTimeout: 5 * time.Second, MetadataTTL: time.Second}
	}
	if c.UnknownTopicTimeout <= 0 {
		c.UnknownTopicTimeout = time.Minute
	}
	if c.MetadataRefresh <= 0 {
		c.MetadataRefresh = time.Minute
	}
	if c.TopicIdleTimeout <= 0 {
		c.TopicIdleTimeout = 2 * time.Minute
	}
}

// record is one event on its way to Kafka.
type record struct {
	ev     *replication.Event
	msg    kafka.Message
	size   int
	ack    Acker
	commit time.Time
	// out is the outstanding count of the lane the record was routed to
	// (nil before routing); see done.
	out *atomic.Int64
}

// done reports rec as taken care of (acknowledged by Kafka, parked or
// dead-lettered) and then takes it off its lane's outstanding count. That
// order matters: a router that sees the count at zero (to switch partition
// counts, or to evict the lane) relies on the Acks having happened.
func (rec *record) done() {
	rec.ack.Ack(rec.size)
	if rec.out != nil {
		rec.out.Add(-1)
	}
}

// Publisher routes events to per-partition lanes. Publish never blocks;
// the caller bounds what is in flight.
type Publisher struct {
	cfg Config
	log *slog.Logger
	m   Metrics
	// client and the combiner carry metadata and produce requests over
	// one transport: one connection pool per broker, shared by every
	// lane. closeIdle releases its idle connections on Close.
	closeIdle func()
	client    *kafka.Client
	combiner  *combiner
	holder    *holder
	lanes     atomic.Int64 // lanes started, over all topics
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	fatal     chan error
	mu        sync.Mutex
	routers   map[string]*router
	// cfgErr is RecordConfig's validation error, returned by Publish.
	cfgErr error
}

// New returns a Publisher; it does not contact Kafka until used.
func New(cfg Config, log *slog.Logger, m Metrics) *Publisher {
	cfg.defaults()
	return newPublisher(cfg, log, m, cfg.Transport, cfg.Transport.CloseIdleConnections)
}

// newPublisher returns a Publisher whose metadata and produce requests go
// through rt (tests pass a fake broker); closeIdle, if set, runs on Close.
func newPublisher(cfg Config, log *slog.Logger, m Metrics, rt kafka.RoundTripper, closeIdle func()) *Publisher {
	if m == nil {
		m = nopMetrics{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	addr := kafka.TCP(cfg.Brokers...)
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{
		cfg: cfg, log: log, m: m, ctx: ctx, cancel: cancel, cfgErr: cfg.RecordConfig.Validate(),
		fatal:     make(chan error, 1),
		routers:   make(map[string]*router),
		closeIdle: closeIdle,
		client:    &kafka.Client{Addr: addr, Transport: rt, Timeout: 10 * time.Second},
	}
	p.combiner = newCombiner(ctx, rt, addr, cfg.WriteTimeout, cfg.Linger, func() int { return int(p.lanes.Load()) })
	p.combiner.run(&p.wg)
	p.holder = newHolder(p)
	if cfg.DeadLetters != nil {
		p.wg.Add(1)
		go p.holder.run()
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
// aggregate goes to the holder, which parks it without making the
// replication goroutine wait for the aggregate's lock. The error is for
// failures the relay must stop on.
func (p *Publisher) Publish(ctx context.Context, ev *replication.Event, ack Acker) error {
	if p.cfgErr != nil {
		return p.cfgErr
	}
	rec := &record{ev: ev, ack: ack, commit: ev.CommitTime}
	rec.msg.Topic = p.cfg.Template.Render(ev.AggregateType, ev.EventType)
	if p.cfg.DeadLetters != nil && p.holder.route(rec) {
		return nil
	}
	msg, reason, err := p.message(rec.msg.Topic, ev)
	if err != nil {
		return p.poison(ctx, ev, rec.msg.Topic, reason, err, ack)
	}
	rec.msg, rec.size = msg, messageSize(&msg)
	p.enqueue(rec)
	return nil
}

// forward builds the record of an event the holder released and queues it
// at its router, or dead-letters it when it cannot become a record. It
// returns false when the publisher is closing or failed.
func (p *Publisher) forward(rec *record) bool {
	msg, reason, err := p.message(rec.msg.Topic, rec.ev)
	if err != nil {
		p.m.PublishError(reason, string(Permanent))
		return p.settle(rec, reason, err)
	}
	rec.msg, rec.size = msg, messageSize(&msg)
	p.enqueue(rec)
	return true
}

// enqueue hands rec to its topic's router, starting the router if needed.
func (p *Publisher) enqueue(rec *record) {
	topic := rec.msg.Topic
	for {
		p.mu.Lock()
		r := p.routers[topic]
		if r == nil {
			r = &router{p: p, topic: topic, q: newQueue(), lanes: map[int]*lane{}}
			p.routers[topic] = r
			p.wg.Add(1)
			go r.run()
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
// Publish of its topic starts a new router.
func (p *Publisher) retired(r *router) {
	p.mu.Lock()
	if p.routers[r.topic] == r {
		delete(p.routers, r.topic)
	}
	p.mu.Unlock()
}

// message builds ev's record or says, with a metric-friendly reason, why
// it cannot exist.
func (p *Publisher) message(topic string, ev *replication.Event) (kafka.Message, string, error) {
	fail := func(reason, detail string) (kafka.Message, string, error) {
		return kafka.Message{}, reason, &EventError{EventID: ev.EventID, AggregateID: ev.AggregateID, Reason: detail}
	}
	// A NULL payload is an invalid row, or with TombstoneOnNullPayload
	// (when it is the row's only fault) a tombstone.
	tombstone := false
	if ev.Invalid != "" {
		if !p.cfg.TombstoneOnNullPayload || ev.Invalid != replication.InvalidNullPayload {
			return fail("invalid_row", ev.Invalid)
		}
		tombstone = true
	}
	if ev.AggregateID == "" {
		return fail("empty_aggregate_id", "aggregate_id is empty")
	}
	if err := ValidTopic(topic); err != nil {
		return fail("invalid_topic", err.Error())
	}
	if p.cfg.Format == FormatCloudEvents && ev.EventType == "" {
		return fail("invalid_row", "event_type is empty: a CloudEvent needs a type")
	}
	msg, err := p.cfg.build(topic, ev, tombstone)
	if err != nil {
		return fail("invalid_headers", err.Error())
	}
	if tombstone {
		msg.Value = nil
	}
	if n := messageSize(&msg); n > p.cfg.MaxBatchBytes {
		return fail("message_too_large", fmt.Sprintf("record of %d bytes exceeds --max-batch-bytes %d", n, p.cfg.MaxBatchBytes))
	}
	return msg, "", nil
}

// poison hands ev to DeadLetters, or fails without one.
func (p *Publisher) poison(ctx context.Context, ev *replication.Event, topic, reason string, cause error, ack Acker) error {
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
		var fatal interface{ Fatal() bool }
		if errors.As(err, &fatal) && fatal.Fatal() {
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
// slot was not confirmed past them, so they will be redelivered).
func (p *Publisher) Close() error {
	p.cancel()
	p.wg.Wait()
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

// backoff returns a full-jitter delay for attempt (1-based).
func (p *Publisher) backoff(attempt int) time.Duration {
	return backoff.Jitter(attempt, p.cfg.BackoffBase, p.cfg.BackoffMax)
}

// sleep waits d unless the publisher closes first.
func (p *Publisher) sleep(d time.Duration) bool { return backoff.Sleep(p.ctx, d) }

// router assigns a topic's records to partition lanes in arrival order.
//
// Only the router's goroutine touches its fields (lanes, partitions, ...);
// Publish reaches it through q alone. Each lane counts its outstanding
// records (routed, not yet taken care of), which lets the router switch to
// a new partition count only once nothing routed under the old one is in
// flight, and remove lanes that have been idle for TopicIdleTimeout. Once
// it has no lanes left and has been idle as long, the router closes its
// queue and exits (see sweep).
type router struct {
	p          *Publisher
	topic      string
	q          *queue
	lanes      map[int]*lane
	partitions []int
	leaders    []int // broker id per partition, -1 unknown
	fetched    time.Time
	// unknownSince is when the topic was first reported unknown.
	unknownSince time.Time
	// sweeps counts housekeeping ticks; lastTake is the sweep of the last
	// batch taken (a lane keeps the sweep of its last record). Counting
	// ticks instead of reading the clock keeps time.Now off the per-event
	// path.
	sweeps, lastTake uint64
}

// Idle eviction runs every TopicIdleTimeout/idleSweeps (see sweepEvery):
// a lane or router is removed after idleSweeps ticks without a record.
const idleSweeps = 4

// sweepEvery returns the router's housekeeping interval and how many
// ticks without a record make a lane or router idle: a quarter of
// TopicIdleTimeout, or less so that a stuck lane's partition is checked
// about every MetadataRefresh.
func (c *Config) sweepEvery() (time.Duration, uint64) {
	every := max(min(c.TopicIdleTimeout/idleSweeps, c.MetadataRefresh/2), time.Millisecond)
	n := uint64((c.TopicIdleTimeout + every - 1) / every)
	return every, max(n, 1)
}

func (r *router) run() {
	defer r.p.wg.Done()
	every, idle := r.p.cfg.sweepEvery()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var batch []*record
	var balancer kafka.Murmur2Balancer
	for {
		var ok bool
		batch, ok = r.q.poll(r.p.ctx, tick.C, 4096, 1<<62, batch)
		if !ok {
			return
		}
		if len(batch) == 0 { // a tick while idle
			if !r.sweep(idle) {
				return
			}
			continue
		}
		r.lastTake = r.sweeps
		switch r.resolve() {
		case topicClosing:
			return
		case topicMissing:
			// The topic stayed unknown past UnknownTopicTimeout: its
			// events are poison, in order, until it appears.
			for _, rec := range batch {
				held, ok := r.p.hold(rec)
				if !ok {
					return
				}
				if held {
					continue
				}
				if !r.p.settle(rec, "unknown_topic", fmt.Errorf("topic %s does not exist (create it, or run with --create-topics)", r.topic)) {
					return
				}
			}
			clear(batch)
			continue
		}
		for _, rec := range batch {
			part := balancer.Balance(rec.msg, r.partitions...)
			rec.msg.Partition = part
			l := r.lanes[part]
			if l == nil {
				l = r.startLane(part)
			}
			l.lastSweep = r.sweeps
			rec.out = &l.outstanding
			l.outstanding.Add(1)
			l.q.push(rec)
		}
		clear(batch)
		select {
		case <-tick.C: // busy: sweep between batches
			if !r.sweep(idle) {
				return
			}
		default:
		}
	}
}

// startLane starts the lane of partition part.
func (r *router) startLane(part int) *lane {
	ctx, stop := context.WithCancel(r.p.ctx)
	l := &lane{p: r.p, topic: r.topic, partition: part, q: newQueue(), ctx: ctx, stop: stop}
	l.leader.Store(int32(r.leader(part)))
	r.lanes[part] = l
	r.p.lanes.Add(1)
	r.p.wg.Add(1)
	go l.run()
	return l
}

// sweep is the router's housekeeping, once per tick. It removes lanes
// that got no record for idle ticks and have nothing outstanding (so their
// queue is empty and no record can reach them again); with no lane left
// and no record for as long, it retires the router. While records are
// outstanding it re-reads the partition count every MetadataRefresh even
// without new events: a lane retrying a partition the topic no longer has
// would otherwise retry for ever. It returns false when the router must
// exit.
func (r *router) sweep(idle uint64) bool {
	r.sweeps++
	for part, l := range r.lanes {
		if r.sweeps-l.lastSweep > idle && l.outstanding.Load() == 0 {
			l.stop()
			delete(r.lanes, part)
			r.p.lanes.Add(-1)
		}
	}
	if len(r.lanes) == 0 {
		if r.sweeps-r.lastTake > idle && r.q.closeIfEmpty() {
			r.p.retired(r)
			return false
		}
		return true
	}
	if r.partitions != nil && time.Since(r.fetched) >= r.p.cfg.MetadataRefresh && r.outstanding() > 0 {
		return r.resolve() != topicClosing
	}
	return true
}

// outstanding returns how many records routed to the router's lanes are
// not yet taken care of.
func (r *router) outstanding() int64 {
	var n int64
	for _, l := range r.lanes {
		n += l.outstanding.Load()
	}
	return n
}

// topicState is the outcome of router.resolve.
type topicState int

const (
	topicReady topicState = iota
	topicMissing
	topicClosing
)

// resolve makes sure the topic's partition count is known, retrying with
// backoff while the topic or the cluster is unavailable. A topic that stays
// unknown longer than UnknownTopicTimeout is reported missing. The count is
// refreshed periodically so added partitions are used.
func (r *router) resolve() topicState {
	if r.partitions != nil && time.Since(r.fetched) < r.p.cfg.MetadataRefresh {
		return topicReady
	}
	for attempt := 1; ; attempt++ {
		leaders, err := r.p.partitionLeaders(r.p.ctx, r.topic)
		if err == nil {
			n := len(leaders)
			if old := len(r.partitions); old > 0 && n != old && !r.switchCount(old, n) {
				return topicClosing
			}
			r.leaders = leaders
			for part, l := range r.lanes {
				l.leader.Store(int32(r.leader(part)))
			}
			if n != len(r.partitions) {
				r.partitions = make([]int, n)
				for i := range r.partitions {
					r.partitions[i] = i
				}
				r.p.log.Info("topic metadata", slog.String("stage", "publish"), slog.String("topic", r.topic), slog.Int("partitions", n))
			}
			r.fetched = time.Now()
			r.unknownSince = time.Time{}
			return topicReady
		}
		if r.p.ctx.Err() != nil {
			return topicClosing
		}
		// TLS and credential failures (kafkaconn.Classify) are fatal here
		// too: classify starts with them.
		class, reason := classify(err)
		r.p.cfg.LastFailure.Record(Failure{At: time.Now(), Class: class, Reason: reason, Topic: r.topic, Partition: -1, Attempt: attempt, Err: err})
		if class == Fatal {
			r.p.log.Error("topic refused for a reason no retry can fix; stopping with the slot position held", slog.String("stage", "publish"), slog.String("topic", r.topic), slog.String("reason", reason), slog.Any("error", err))
			r.p.fail(fatalError(r.topic, -1, reason, err))
			return topicClosing
		}
		if r.partitions != nil {
			return topicReady // keep the known layout
		}
		if errors.Is(err, kafka.UnknownTopicOrPartition) && !r.p.cfg.CreateTopics {
			if r.unknownSince.IsZero() {
				r.unknownSince = time.Now()
			}
			if time.Since(r.unknownSince) >= r.p.cfg.UnknownTopicTimeout {
				return topicMissing
			}
		}
		d := r.p.backoff(attempt)
		r.p.log.LogAttrs(context.Background(), retryLevel(attempt), "topic metadata unavailable, retrying",
			slog.String("stage", "publish"), slog.String("topic", r.topic), slog.Int("attempt", attempt),
			slog.Duration("backoff", d), slog.Any("error", err))
		if !r.p.sleep(d) {
			return topicClosing
		}
	}
}

// drainPoll is how often a router waiting to switch partition counts
// checks its lanes' outstanding records.
const drainPoll = 5 * time.Millisecond

// switchCount handles a changed partition count. Routing under the new
// count at once would let a key's next event, on its new partition,
// overtake its earlier events still queued or retried on the old one. So
// the router stops routing (new records wait in its queue, bounded by the
// relay's in-flight window) until every record routed under the old count
// is acknowledged, parked or dead-lettered. A smaller count (the topic
// deleted and re-created) cannot be ordered after the old partitions'
// history at all: the publisher fails, holding the slot position. It
// returns false when the router must exit.
func (r *router) switchCount(old, n int) bool {
	log := r.p.log
	if n < old {
		err := fmt.Errorf("topic %s shrank from %d to %d partitions (deleted and re-created?): its keys would move "+
			"to other partitions, out of order with their history; stopping with the slot position held. "+
			"Re-create the topic with at least %d partitions, or, to accept the new layout (consumers then see the "+
			"re-keyed events without ordering against the old partitions), restart the relay", r.topic, old, n, old)
		log.Error("topic has fewer partitions than before; stopping with the slot position held", slog.String("stage", "publish"), slog.String("topic", r.topic), slog.Int("old_partitions", old), slog.Int("new_partitions", n))
		r.p.fail(err)
		return false
	}
	if out := r.outstanding(); out > 0 {
		log.Info("topic partition count changed; waiting for the topic's earlier events before switching", slog.String("stage", "publish"), slog.String("topic", r.topic), slog.Int("old_partitions", old), slog.Int("new_partitions", n), slog.Int64("outstanding", out))
		for r.outstanding() > 0 {
			if !r.p.sleep(drainPoll) {
				return false
			}
		}
	}
	log.Warn("topic partition count changed; routing under the new count: keys may move to other partitions", slog.String("stage", "publish"), slog.String("topic", r.topic), slog.Int("old_partitions", old), slog.Int("new_partitions", n))
	r.p.m.PartitionChange(r.topic)
	return true
}

// leader returns the broker id leading partition part, -1 if unknown.
func (r *router) leader(part int) int {
	if part < len(r.leaders) {
		return r.leaders[part]
	}
	return -1
}

// partitionLeaders returns the leader's broker id of each of topic's
// partitions (-1 for a partition without a leader), creating the topic
// if configured to.
func (p *Publisher) partitionLeaders(ctx context.Context, topic string) ([]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := p.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, err
	}
	for _, t := range resp.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			if t.Error == kafka.UnknownTopicOrPartition && p.cfg.CreateTopics {
				return nil, p.createTopic(ctx, topic)
			}
			return nil, fmt.Errorf("topic %s: %w", topic, t.Error)
		}
		if len(t.Partitions) == 0 {
			return nil, fmt.Errorf("topic %s has no partitions yet", topic)
		}
		leaders := make([]int, len(t.Partitions))
		for i := range leaders {
			leaders[i] = -1
		}
		for _, part := range t.Partitions {
			if part.ID < 0 || part.ID >= len(leaders) {
				return nil, fmt.Errorf("topic %s: partition %d outside 0..%d", topic, part.ID, len(leaders)-1)
			}
			if part.Leader.Host != "" {
				leaders[part.ID] = part.Leader.ID
			}
		}
		return leaders, nil
	}
	if p.cfg.CreateTopics {
		return nil, p.createTopic(ctx, topic)
	}
	return nil, fmt.Errorf("topic %s: %w", topic, kafka.UnknownTopicOrPartition)
}

// createTopic creates topic and reports it as not yet usable, so the
// caller retries the metadata lookup.
func (p *Publisher) createTopic(ctx context.Context, topic string) error {
	resp, err := p.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: topic, NumPartitions: p.cfg.TopicPartitions, ReplicationFactor: p.cfg.TopicReplicationFactor,
	}}})
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	if e := resp.Errors[topic]; e != nil && e != kafka.TopicAlreadyExists {
		return fmt.Errorf("create topic %s: %w", topic, e)
	}
	p.log.Info("created topic", slog.String("stage", "publish"), slog.String("topic", topic), slog.Int("partitions", p.cfg.TopicPartitions))
	return fmt.Errorf("topic %s was just created", topic)
}

// lane writes one partition's records, one batch at a time.
type lane struct {
	p         *Publisher
	topic     string
	partition int
	// ctx ends when the publisher closes or the router evicts the lane
	// (stop), which it does only with nothing outstanding.
	ctx  context.Context
	stop context.CancelFunc
	// outstanding counts records routed to the lane and not yet taken
	// care of (record.done).
	outstanding atomic.Int64
	// lastSweep is the router's sweep count when it last routed a record
	// here; only the router touches it.
	lastSweep uint64
	// leader is the partition leader's broker id (-1 unknown), kept
	// current by the router; the combiner groups batches by it.
	leader  atomic.Int32
	q       *queue
	records []kafka.Record
	lastErr error
}

// produce sends the lane's records as one partition batch of a combined
// produce request (see combiner) and waits for acks=all. The lane has
// already formed the batch, so it goes straight to the protocol: kafka-go's
// Writer would re-batch it, wait its BatchTimeout on a partial batch and
// allocate a full-size batch buffer for every call.
func (l *lane) produce(recs []*record) error {
	// Built per attempt: the record readers are consumed by a request.
	l.records = l.records[:0]
	size := 0
	for _, rec := range recs {
		m := &rec.msg
		l.records = append(l.records, kafka.Record{Time: m.Time, Key: kafka.NewBytes(m.Key), Value: kafka.NewBytes(m.Value), Headers: m.Headers})
		size += rec.size
	}
	return l.p.combiner.produce(&batch{
		topic: l.topic, partition: l.partition, leader: int(l.leader.Load()), bytes: size, records: l.records,
	})
}

func (l *lane) run() {
	p := l.p
	defer p.wg.Done()
	var batch, send []*record
	for {
		batch = l.q.take(l.ctx, p.cfg.MaxBatch, p.cfg.MaxBatchBytes, batch)
		if batch == nil {
			return
		}
		// Events whose aggregate got quarantined after they were routed
		// (a poison event earlier in this lane) are parked, not sent.
		send = send[:0]
		for _, rec := range batch {
			held, ok := p.hold(rec)
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
func (l *lane) write(recs []*record) bool {
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
		held, ok := p.hold(rec)
		if !ok {
			return false
		}
		if held {
			continue
		}
		switch l.send([]*record{rec}) {
		case sent:
			l.acked([]*record{rec})
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
// closes.
func (l *lane) send(recs []*record) sendResult {
	p := l.p
	var vanished time.Time // first UNKNOWN_TOPIC_OR_PARTITION of this batch
	for attempt := 1; ; attempt++ {
		p.m.ProduceRequest()
		err := l.produce(recs)
		if err == nil {
			if attempt > 1 {
				p.log.Info("partition batch delivered after retries", slog.String("stage", "publish"), slog.String("topic", l.topic), slog.Int("partition", l.partition), slog.Int("attempt", attempt))
			}
			return sent
		}
		if p.ctx.Err() != nil {
			return closing
		}
		class, reason := classify(err)
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
		p.cfg.LastFailure.Record(Failure{At: time.Now(), Class: class, Reason: reason, Topic: l.topic, Partition: l.partition,
			Attempt: attempt, EventID: first.EventID, AggregateID: first.AggregateID, EventType: first.EventType, Err: err})
		level := retryLevel(attempt)
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
		d := p.backoff(attempt)
		p.log.LogAttrs(context.Background(), level, "publish failed, retrying", append(attrs, slog.Duration("backoff", d))...)
		if !p.sleep(d) {
			return closing
		}
	}
}

func (l *lane) acked(recs []*record) {
	p := l.p
	now := time.Now()
	for _, rec := range recs {
		rec.done()
		p.m.CommitToAck(now.Sub(rec.commit))
	}
	p.m.BatchPublished(l.topic, len(recs))
}

// hold asks DeadLetters whether rec must be parked, retrying while
// PostgreSQL is unavailable. ok is false when the publisher stops.
func (p *Publisher) hold(rec *record) (held, ok bool) {
	q := p.cfg.DeadLetters
	if q == nil {
		return false, true
	}
	ok = p.durably("park", func(ctx context.Context) error {
		var err error
		held, err = q.Hold(ctx, rec.ev, rec.msg.Topic)
		return err
	})
	if ok && held {
		rec.done()
	}
	return held, ok
}

// settle dead-letters a record Kafka rejected for good (or fails the
// publisher without DeadLetters) and acknowledges it.
func (p *Publisher) settle(rec *record, reason string, cause error) bool {
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

// retryLog returns the log event for a retry: a warning when a failure
// starts and every tenth attempt after, debug in between, so a long outage
// is visible without a line per partition per backoff.
func retryLevel(attempt int) slog.Level {
	if attempt == 1 || attempt%10 == 0 {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}
