package publisher

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	metadataapi "github.com/segmentio/kafka-go/protocol/metadata"
	produceapi "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

// fakeCluster answers metadata requests from its own partition counts and
// hands produce requests to produce (a producetest.Broker, usually), so a whole
// Publisher (routers, lanes, sink) runs without Kafka.
type fakeCluster struct {
	produce kafka.RoundTripper

	mu         sync.Mutex
	partitions map[string]int // topic -> partition count; 0 or absent: unknown
	lookups    int
}

func newFakeCluster(produce kafka.RoundTripper) *fakeCluster {
	return &fakeCluster{produce: produce, partitions: map[string]int{}}
}

// setPartitions sets topic's partition count as the next metadata
// response reports it.
func (c *fakeCluster) setPartitions(topic string, n int) {
	c.mu.Lock()
	c.partitions[topic] = n
	c.mu.Unlock()
}

func (c *fakeCluster) RoundTrip(ctx context.Context, addr net.Addr, msg protocol.Message) (protocol.Message, error) {
	var topics []string
	switch req := msg.(type) {
	case *metadataapi.Request: // kafka.Client.Metadata (Ping)
		topics = req.TopicNames
	case *metadataQuestion: // the publisher's own questions
		res, err := c.metadata(req.Topics)
		return metadataAnswer{res}, err
	default:
		return c.produce.RoundTrip(ctx, addr, msg)
	}
	return c.metadata(topics)
}

// metadata answers a metadata request for topics.
func (c *fakeCluster) metadata(topics []string) (*metadataapi.Response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lookups++
	res := &metadataapi.Response{
		Brokers:      []metadataapi.ResponseBroker{{NodeID: 1, Host: "127.0.0.1", Port: 1}},
		ControllerID: 1,
	}
	for _, topic := range topics {
		t := metadataapi.ResponseTopic{Name: topic}
		n := c.partitions[topic]
		if n == 0 {
			t.ErrorCode = int16(kafka.UnknownTopicOrPartition)
		}
		for i := range n {
			t.Partitions = append(t.Partitions, metadataapi.ResponsePartition{PartitionIndex: int32(i), LeaderID: 1})
		}
		res.Topics = append(res.Topics, t)
	}
	return res, nil
}

// okBroker acknowledges every partition of every produce request without
// keeping anything (for benchmarks).
type okBroker struct{}

func (okBroker) RoundTrip(_ context.Context, _ net.Addr, msg protocol.Message) (protocol.Message, error) {
	req := msg.(*rawproduce.Request)
	res := &produceapi.Response{Topics: make([]produceapi.ResponseTopic, len(req.Topics))}
	for i, t := range req.Topics {
		res.Topics[i].Topic = t.Topic
		res.Topics[i].Partitions = make([]produceapi.ResponsePartition, len(t.Partitions))
		for j, p := range t.Partitions {
			res.Topics[i].Partitions[j].Partition = p.Partition
		}
	}
	return res, nil
}

// startPublisher runs a Publisher against rt and closes it when the test
// ends.
func startPublisher(t testing.TB, cfg config, log *slog.Logger, rt kafka.RoundTripper) (*Publisher, *metrics.Relay) {
	t.Helper()
	m := metrics.New()
	cfg.Brokers = []string{"127.0.0.1:1"}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase, cfg.BackoffMax = time.Millisecond, 5*time.Millisecond
	}
	if cfg.Template.t.IsZero() {
		tt, err := ParseTopicTemplate("{aggregate_type}")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Template = tt
	}
	cfg = testConfig(cfg)
	p := newPublisher(cfg, log, m.Publisher(), rt, nil)
	t.Cleanup(func() { _ = p.Close() })
	return p, m
}

// ackLog records the order in which events are acknowledged.
type ackLog struct {
	mu  sync.Mutex
	ids []string
	n   atomic.Int64
}

// acker returns the Acker of event id.
func (a *ackLog) acker(id string) Acker { return ackFunc(func(int) { a.add(id) }) }

func (a *ackLog) add(id string) {
	a.mu.Lock()
	a.ids = append(a.ids, id)
	a.mu.Unlock()
	a.n.Add(1)
}

func (a *ackLog) order() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.ids...)
}

// waitFor waits until n events are acknowledged, polling; in a synctest
// bubble the poll interval and within are virtual time.
func (a *ackLog) waitFor(t testing.TB, n int, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); a.n.Load() < int64(n); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events acknowledged after %s: %v", a.n.Load(), n, within, a.order())
		}
		// wall-clock only outside a bubble, where it is a poll interval
		// for tests that wait for no timer; inside one it is virtual time.
		time.Sleep(time.Millisecond)
	}
}

type ackFunc func(int)

func (f ackFunc) Ack(n int) { f(n) }

// testEvent returns an event of aggregate (typ, id); its topic is typ
// under the tests' template.
func testEvent(typ, id, eventID string) *replication.WALEvent {
	return &replication.WALEvent{Row: record.Row{EventID: eventID, AggregateType: typ, AggregateID: id, EventType: "t", Payload: []byte("{}")}}
}

// keyMoving returns an aggregate id that murmur2 puts on partition from
// among oldCount partitions and on another partition among newCount.
func keyMoving(from, oldCount, newCount int) (string, int) {
	var b kafka.Murmur2Balancer
	parts := func(n int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = i
		}
		return p
	}
	for i := 0; ; i++ {
		key := fmt.Sprintf("agg-%d", i)
		msg := kafka.Message{Key: []byte(key)}
		if b.Balance(msg, parts(oldCount)...) == from {
			if to := b.Balance(msg, parts(newCount)...); to != from {
				return key, to
			}
		}
	}
}

// keyOn returns an aggregate id that murmur2 puts on partition part of n.
func keyOn(part, n int) string {
	var b kafka.Murmur2Balancer
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	for i := 0; ; i++ {
		key := fmt.Sprintf("agg-%d", i)
		if b.Balance(kafka.Message{Key: []byte(key)}, parts...) == part {
			return key
		}
	}
}

// BenchmarkPublish measures the per-event path through router, lanes and
// sink against a broker that acknowledges at once.
func BenchmarkPublish(b *testing.B) {
	c := newFakeCluster(okBroker{})
	c.setPartitions("bench", 6)
	p, _ := startPublisher(b, config{}, slog.New(slog.DiscardHandler), c)
	events := make([]*replication.WALEvent, 1000)
	for i := range events {
		events[i] = testEvent("bench", fmt.Sprintf("agg-%d", i), fmt.Sprintf("e-%d", i))
	}
	var acked atomic.Int64
	ack := ackFunc(func(int) { acked.Add(1) })
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.Publish(ctx, events[i%len(events)], ack); err != nil {
			b.Fatal(err)
		}
		// Stay within a window, like the relay's in-flight limit.
		for int64(i)-acked.Load() > 10000 {
			// wall-clock: a benchmark measures real time (no bubble); a short
			// poll keeps the window's cost out of the publish path.
			time.Sleep(10 * time.Microsecond)
		}
	}
	for acked.Load() < int64(b.N) {
		time.Sleep(10 * time.Microsecond) // wall-clock: as above, the benchmark's real time
	}
}

// testConfig is cfg with the defaults New applies, but for Linger, which
// stays at its zero (send at once) unless the test sets it.
func testConfig(cfg config) config {
	if cfg.Linger == 0 {
		cfg.Linger = -1
	}
	cfg.Config = cfg.Config.WithDefaults()
	if cfg.Linger < 0 {
		cfg.Linger = 0
	}
	if cfg.Transport == nil {
		cfg.Transport = &kafka.Transport{ClientID: "outbox-relay", DialTimeout: 5 * time.Second, MetadataTTL: time.Second}
	}
	return cfg
}
