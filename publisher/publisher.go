package publisher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/metrics"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Acker is told once Kafka has acknowledged an event of size bytes.
type Acker interface {
	Ack(bytes int)
}

// Config configures a Publisher.
type Config struct {
	Brokers  []string
	Template TopicTemplate
	// MaxBatch and MaxBatchBytes bound one partition batch (one produce
	// request). MaxBatchBytes must stay under the broker's
	// message.max.bytes, which applies to a whole record batch.
	MaxBatch      int
	MaxBatchBytes int
	// BatchTimeout is the Writer's wait for a partial batch. kafka-go's
	// default of 1 s would put a second on every quiet event.
	BatchTimeout time.Duration
	// BackoffBase and BackoffMax bound the retry delay (full jitter).
	BackoffBase, BackoffMax time.Duration
	// CreateTopics creates missing topics with TopicPartitions and
	// TopicReplicationFactor (-1: the broker's default).
	CreateTopics           bool
	TopicPartitions        int
	TopicReplicationFactor int
	// WriteTimeout bounds one produce request.
	WriteTimeout time.Duration
}

func (c *Config) defaults() {
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1000
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 900 << 10
	}
	if c.BatchTimeout <= 0 {
		c.BatchTimeout = 2 * time.Millisecond
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
		c.WriteTimeout = 30 * time.Second
	}
}

// record is one event on its way to Kafka.
type record struct {
	msg    kafka.Message
	size   int
	ack    Acker
	commit time.Time
}

// Publisher routes events to per-partition lanes. Publish never blocks;
// the caller bounds what is in flight.
type Publisher struct {
	cfg     Config
	log     zerolog.Logger
	m       *metrics.Relay
	w       *kafka.Writer
	client  *kafka.Client
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	fatal   chan error
	mu      sync.Mutex
	routers map[string]*router
}

// New returns a Publisher; it does not contact Kafka until used.
func New(cfg Config, log zerolog.Logger, m *metrics.Relay) *Publisher {
	cfg.defaults()
	transport := &kafka.Transport{
		ClientID:    "outbox-relay",
		DialTimeout: 5 * time.Second,
		MetadataTTL: 10 * time.Second,
	}
	addr := kafka.TCP(cfg.Brokers...)
	ctx, cancel := context.WithCancel(context.Background())
	return &Publisher{
		cfg: cfg, log: log, m: m, ctx: ctx, cancel: cancel,
		fatal:   make(chan error, 1),
		routers: make(map[string]*router),
		client:  &kafka.Client{Addr: addr, Transport: transport, Timeout: 10 * time.Second},
		w: &kafka.Writer{
			Addr:         addr,
			Transport:    transport,
			Balancer:     assignedBalancer{},
			RequiredAcks: kafka.RequireAll,
			BatchSize:    cfg.MaxBatch,
			BatchBytes:   int64(cfg.MaxBatchBytes),
			BatchTimeout: cfg.BatchTimeout,
			WriteTimeout: cfg.WriteTimeout,
			// Retries are the lane's, with jittered backoff and logs.
			MaxAttempts:            1,
			AllowAutoTopicCreation: cfg.CreateTopics,
		},
	}
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

// Publish queues ev for its topic. It returns an *EventError for an event
// that can never be written; ack is called once Kafka acknowledged it.
func (p *Publisher) Publish(ev *replication.Event, ack Acker) error {
	topic := p.cfg.Template.Render(ev.AggregateType, ev.EventType)
	if err := ValidTopic(topic); err != nil {
		return &EventError{EventID: ev.EventID, AggregateID: ev.AggregateID, Reason: err.Error()}
	}
	msg, err := buildMessage(topic, ev)
	if err != nil {
		return err
	}
	rec := &record{msg: msg, size: messageSize(&msg), ack: ack, commit: ev.CommitTime}
	if rec.size > p.cfg.MaxBatchBytes {
		return &EventError{EventID: ev.EventID, AggregateID: ev.AggregateID,
			Reason: fmt.Sprintf("record of %d bytes exceeds the maximum batch of %d bytes", rec.size, p.cfg.MaxBatchBytes)}
	}
	p.mu.Lock()
	r := p.routers[topic]
	if r == nil {
		r = &router{p: p, topic: topic, q: newQueue(), lanes: map[int]*lane{}}
		p.routers[topic] = r
		p.wg.Add(1)
		go r.run()
	}
	p.mu.Unlock()
	r.q.push(rec)
	return nil
}

// Close stops all lanes; records not yet acknowledged are abandoned (the
// slot was not confirmed past them, so they will be redelivered).
func (p *Publisher) Close() error {
	p.cancel()
	p.wg.Wait()
	return p.w.Close()
}

func (p *Publisher) fail(err error) {
	select {
	case p.fatal <- err:
	default:
	}
}

// backoff returns a full-jitter delay for attempt (1-based).
func (p *Publisher) backoff(attempt int) time.Duration {
	d := p.cfg.BackoffBase << min(attempt-1, 20)
	if d > p.cfg.BackoffMax || d <= 0 {
		d = p.cfg.BackoffMax
	}
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

func (p *Publisher) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// router assigns a topic's records to partition lanes in arrival order.
type router struct {
	p          *Publisher
	topic      string
	q          *queue
	lanes      map[int]*lane
	partitions []int
	fetched    time.Time
}

func (r *router) run() {
	defer r.p.wg.Done()
	var batch []*record
	var balancer kafka.Murmur2Balancer
	for {
		batch = r.q.take(r.p.ctx, 4096, 1<<62, batch)
		if batch == nil {
			return
		}
		if !r.resolve() {
			return
		}
		for _, rec := range batch {
			part := balancer.Balance(rec.msg, r.partitions...)
			rec.msg.Partition = part
			l := r.lanes[part]
			if l == nil {
				l = &lane{p: r.p, topic: r.topic, partition: part, q: newQueue()}
				r.lanes[part] = l
				r.p.wg.Add(1)
				go l.run()
			}
			l.q.push(rec)
		}
		clear(batch)
	}
}

// resolve makes sure the topic's partition count is known, retrying with
// backoff while the topic or the cluster is unavailable. It refreshes the
// count periodically so added partitions are used.
func (r *router) resolve() bool {
	if r.partitions != nil && time.Since(r.fetched) < time.Minute {
		return true
	}
	for attempt := 1; ; attempt++ {
		n, err := r.p.partitionCount(r.p.ctx, r.topic)
		if err == nil {
			if n != len(r.partitions) {
				r.partitions = make([]int, n)
				for i := range r.partitions {
					r.partitions[i] = i
				}
				r.p.log.Info().Str("stage", "publish").Str("topic", r.topic).Int("partitions", n).Msg("topic metadata")
			}
			r.fetched = time.Now()
			return true
		}
		if r.p.ctx.Err() != nil {
			return false
		}
		if r.partitions != nil {
			return true // keep the known layout
		}
		d := r.p.backoff(attempt)
		r.p.log.Warn().Str("stage", "publish").Str("topic", r.topic).Int("attempt", attempt).
			Dur("backoff", d).Err(err).Msg("topic metadata unavailable, retrying")
		if !r.p.sleep(d) {
			return false
		}
	}
}

func (p *Publisher) partitionCount(ctx context.Context, topic string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := p.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, err
	}
	for _, t := range resp.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			if t.Error == kafka.UnknownTopicOrPartition && p.cfg.CreateTopics {
				return 0, p.createTopic(ctx, topic)
			}
			return 0, fmt.Errorf("topic %s: %w", topic, t.Error)
		}
		if len(t.Partitions) == 0 {
			return 0, fmt.Errorf("topic %s has no partitions yet", topic)
		}
		return len(t.Partitions), nil
	}
	if p.cfg.CreateTopics {
		return 0, p.createTopic(ctx, topic)
	}
	return 0, fmt.Errorf("topic %s: %w", topic, kafka.UnknownTopicOrPartition)
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
	p.log.Info().Str("stage", "publish").Str("topic", topic).Int("partitions", p.cfg.TopicPartitions).Msg("created topic")
	return fmt.Errorf("topic %s was just created", topic)
}

// lane writes one partition's records, one batch at a time.
type lane struct {
	p         *Publisher
	topic     string
	partition int
	q         *queue
}

func (l *lane) run() {
	p := l.p
	defer p.wg.Done()
	var batch []*record
	var msgs []kafka.Message
	for {
		batch = l.q.take(p.ctx, p.cfg.MaxBatch, p.cfg.MaxBatchBytes, batch)
		if batch == nil {
			return
		}
		msgs = msgs[:0]
		for _, rec := range batch {
			msgs = append(msgs, rec.msg)
		}
		if !l.write(msgs, batch) {
			return
		}
		now := time.Now()
		published := p.m.EventsPublished.WithLabelValues(l.topic)
		for _, rec := range batch {
			rec.ack.Ack(rec.size)
			p.m.CommitToAck.Observe(now.Sub(rec.commit).Seconds())
		}
		published.Add(float64(len(batch)))
		p.m.BatchesPublished.Inc()
		clear(batch)
	}
}

// write retries the batch until Kafka acknowledges it. It returns false
// when the publisher is closing or the failure is permanent.
func (l *lane) write(msgs []kafka.Message, batch []*record) bool {
	p := l.p
	for attempt := 1; ; attempt++ {
		p.m.PublishAttempts.Inc()
		err := p.w.WriteMessages(p.ctx, msgs...)
		if err == nil {
			if attempt > 1 {
				p.log.Info().Str("stage", "publish").Str("topic", l.topic).Int("partition", l.partition).
					Int("attempt", attempt).Msg("partition batch delivered after retries")
			}
			return true
		}
		if p.ctx.Err() != nil {
			return false
		}
		class, reason := classify(err)
		p.m.PublishErrors.WithLabelValues(reason, string(class)).Inc()
		first := batch[0]
		ev := p.log.Warn()
		if class == Permanent {
			ev = p.log.Error()
		}
		ev = ev.Str("stage", "publish").Str("topic", l.topic).Int("partition", l.partition).
			Int("attempt", attempt).Int("batch", len(msgs)).Str("class", string(class)).Str("reason", reason).
			Str("event_id", headerValue(&first.msg, HeaderEventID)).Str("aggregate_id", string(first.msg.Key)).Err(err)
		if class == Permanent {
			ev.Msg("permanent publish failure; stopping with the slot position held")
			p.fail(fmt.Errorf("publish to %s[%d] (event %s): %s: %w", l.topic, l.partition,
				headerValue(&first.msg, HeaderEventID), reason, err))
			return false
		}
		d := p.backoff(attempt)
		ev.Dur("backoff", d).Msg("publish failed, retrying")
		if !p.sleep(d) {
			return false
		}
	}
}

func headerValue(m *kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// assignedBalancer keeps the partition the router chose (murmur2 over the
// partition count the router knows), so that a lane and the Writer always
// agree on where a record goes.
type assignedBalancer struct{}

func (assignedBalancer) Balance(msg kafka.Message, partitions ...int) int {
	for _, p := range partitions {
		if p == msg.Partition {
			return p
		}
	}
	return kafka.Murmur2Balancer{}.Balance(msg, partitions...)
}
