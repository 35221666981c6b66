package publisher

// This file holds the router: one goroutine per topic that assigns the
// topic's records to partition lanes, in arrival order.
//
// Started by Publisher.enqueue (under Publisher.mu, a startstop service:
// router.loop) for the first record of a topic that has no router, and
// again after a retired one; Close stops it. It stops when the
// publisher's context ends (Close), when it fails the publisher (p.fail)
// or a park or dead-letter cannot complete (park, settle), or, idle, by
// retiring itself: sweep closes its empty queue and moves it from
// Publisher.routers to Publisher.retiring (retired), so the next record
// of the topic starts a new router. It owns its lanes' goroutines: it
// stops an idle lane (waiting for it), and on its way out it stops the
// lanes it has left, once the publisher's context ended (stopLanes).
//
// p, topic, q and loop are set by enqueue before the goroutine starts; the rest
// of the router's fields (lanes, partitions, leaders, fetched,
// unknownSince, sweeps, lastTake) and its lanes' lastSweep only its
// goroutine touches. It shares two atomics with each lane: it stores the
// lane's leader (read by the lane for the sink) and adds to its
// outstanding count (taken off by record.done once the record is taken
// care of). It sets a record's Partition and out before handing it on,
// and adds its lanes to and removes them from Publisher.lanes (read by
// the sink).
//
// It reads its queue q, which Publisher.enqueue pushes to (from Publish
// and from the quarantine's forward), polled together with its sweep ticker
// and the publisher's context. It writes to its lanes' queues and is the
// only goroutine that does. It starts the lanes (startLane) and stops one
// (lane.stop) only once that lane has nothing outstanding. Metadata
// lookups (partitionLeaders, createTopic) and, for a topic missing past
// UnknownTopicTimeout, DeadLetters calls happen on this goroutine; a
// fatal failure goes to Publisher.fatal through p.fail.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

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
	p     *Publisher
	topic string
	q     *queue
	// loop runs the router's goroutine (run); nil for a router a test
	// plants without one.
	loop       *startstop.Service
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
// about every PartitionRefresh.
func (c *Config) sweepEvery() (time.Duration, uint64) {
	every := max(min(c.TopicIdleTimeout/idleSweeps, c.PartitionRefresh/2), time.Millisecond)
	n := uint64((c.TopicIdleTimeout + every - 1) / every)
	return every, max(n, 1)
}

func (r *router) run(ctx context.Context) {
	defer r.stopLanes(ctx)
	every, idle := r.p.cfg.sweepEvery()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var batch []*outgoing
	var balancer kafka.Murmur2Balancer
	for {
		var ok bool
		batch, ok = r.q.poll(ctx, tick.C, 4096, 1<<62, batch)
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
				held, ok := r.p.park(rec)
				if !ok {
					return
				}
				if held {
					continue
				}
				if !r.p.settle(rec, "unknown_topic", fmt.Errorf("topic %s does not exist (create it, or run with Publish.CreateTopics)", r.topic)) {
					return
				}
			}
			clear(batch)
			continue
		}
		for _, rec := range batch {
			key := rec.msg
			if r.p.cfg.Record.KeySchema {
				// the framed key is not what an aggregate is partitioned by
				key = kafka.Message{Key: []byte(rec.ev.AggregateID)}
			}
			part := balancer.Balance(key, r.partitions...)
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

// startLane starts the lane of partition part, under the publisher's
// context.
func (r *router) startLane(part int) *lane {
	l := &lane{p: r.p, topic: r.topic, partition: part, q: newQueue()}
	l.loop = startstop.New(l.run)
	l.leader.Store(int32(r.leader(part)))
	if r.p.producer != nil {
		l.seq = r.p.producer.Sequence(r.topic, part)
	}
	r.lanes[part] = l
	r.p.lanes.Add(1)
	l.loop.Start(r.p.ctx)
	return l
}

// stopLanes stops the lanes the router leaves behind when it exits, and
// waits for them. A router exits with lanes only when the publisher
// closes or failed (a retiring one has none). After a failure the lanes
// go on delivering what they hold until Close, as they always did, so
// stopLanes first waits for ctx to end; the router's goroutine lingers
// until then, idle.
func (r *router) stopLanes(ctx context.Context) {
	if len(r.lanes) == 0 {
		return
	}
	<-ctx.Done()
	for _, l := range r.lanes {
		l.loop.Stop()
	}
}

// sweep is the router's housekeeping, once per tick. It removes lanes
// that got no record for idle ticks and have nothing outstanding (so their
// queue is empty and no record can reach them again); with no lane left
// and no record for as long, it retires the router. While records are
// outstanding it re-reads the partition count every PartitionRefresh even
// without new events: a lane retrying a partition the topic no longer has
// would otherwise retry for ever. It returns false when the router must
// exit.
func (r *router) sweep(idle uint64) bool {
	r.sweeps++
	for part, l := range r.lanes {
		if r.sweeps-l.lastSweep > idle && l.outstanding.Load() == 0 {
			l.loop.Stop() // idle: it returns at once
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
	if r.partitions != nil && time.Since(r.fetched) >= r.p.cfg.PartitionRefresh && r.outstanding() > 0 {
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
	if r.partitions != nil && time.Since(r.fetched) < r.p.cfg.PartitionRefresh {
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
		r.p.cfg.recordFailure(Failure{At: time.Now(), Class: class, Reason: reason, Topic: r.topic, Partition: -1, Attempt: attempt, Err: err})
		r.p.m.MetadataRefreshFailed(reason)
		if class == Fatal {
			r.p.log.Error("topic refused for a reason no retry can fix; stopping with the slot position held", slog.String("stage", "publish"), slog.String("topic", r.topic), slog.String("reason", reason), slog.Any("error", err))
			r.p.fail(fatalError(r.topic, -1, reason, err))
			return topicClosing
		}
		if r.partitions != nil {
			// Keep the known layout, and say so: the next sweep past
			// PartitionRefresh asks again.
			r.p.log.Warn("topic metadata refresh failed; keeping the known partitions until the next refresh",
				slog.String("stage", "publish"), slog.String("topic", r.topic), slog.Int("partitions", len(r.partitions)),
				slog.String("reason", reason), slog.Any("error", err))
			r.fetched = time.Now() // ask again after PartitionRefresh, not at every batch
			return topicReady
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
// if configured to. It asks a broker (askMetadata), not kafka-go's cache;
// a topic that exists becomes part of the transport's cached metadata.
func (p *Publisher) partitionLeaders(ctx context.Context, topic string) ([]int, error) {
	t, err := p.askMetadata(ctx, topic)
	if err != nil {
		return nil, err
	}
	if t.ErrorCode != 0 {
		if kafka.Error(t.ErrorCode) == kafka.UnknownTopicOrPartition && p.cfg.CreateTopics {
			return nil, p.createTopic(ctx, topic)
		}
		return nil, fmt.Errorf("topic %s: %w", topic, kafka.Error(t.ErrorCode))
	}
	if len(t.Partitions) == 0 {
		return nil, fmt.Errorf("topic %s has no partitions yet", topic)
	}
	leaders := make([]int, len(t.Partitions))
	for i := range leaders {
		leaders[i] = -1
	}
	for _, part := range t.Partitions {
		id := int(part.PartitionIndex)
		if id < 0 || id >= len(leaders) {
			return nil, fmt.Errorf("topic %s: partition %d outside 0..%d", topic, id, len(leaders)-1)
		}
		if part.LeaderID >= 0 {
			leaders[id] = int(part.LeaderID)
		}
	}
	p.cover(topic)
	return leaders, nil
}

// cover makes topic part of the transport's cached metadata, which
// routes produce requests (see topicTransport).
func (p *Publisher) cover(topic string) {
	if p.topics != nil && p.topics.add(topic) {
		p.log.Debug("the transport's metadata now covers the topic", slog.String("stage", "publish"), slog.String("topic", topic))
	}
}

// createTopic creates topic and reports it as not yet usable, so the
// caller retries the metadata lookup.
func (p *Publisher) createTopic(ctx context.Context, topic string) error {
	// kafka-go waits after CreateTopics until its cache shows the topic:
	// it must be covered first, or the wait lasts until ctx ends.
	p.cover(topic)
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
