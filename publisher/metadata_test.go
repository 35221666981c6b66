package publisher

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/apiversions"
	"github.com/segmentio/kafka-go/protocol/createtopics"
	metadataapi "github.com/segmentio/kafka-go/protocol/metadata"
	produceapi "github.com/segmentio/kafka-go/protocol/produce"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// wireBroker is a one-broker Kafka cluster on a loopback TCP port that
// speaks enough of the protocol (ApiVersions, Metadata, Produce,
// CreateTopics) for a
// real kafka-go Transport, so the tests see what kafka-go's metadata
// cache does: which topics its refreshes ask for, and what happens when
// an answer is slow. The cluster holds the test's topics and, in answers
// for every topic, others more (another application's); slowAll and
// slowNamed delay the answers to metadata requests for every topic and
// for named topics.
type wireBroker struct {
	ln   net.Listener
	host string
	port int32
	done chan struct{}
	wg   sync.WaitGroup

	mu                 sync.Mutex
	partitions         map[string]int
	others             int
	slowAll, slowNamed time.Duration
	asked              [][]string // each metadata request's topics; nil: every topic
	conns              map[net.Conn]bool
}

func newWireBroker(t *testing.T) *wireBroker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().(*net.TCPAddr)
	b := &wireBroker{ln: ln, host: a.IP.String(), port: int32(a.Port), done: make(chan struct{}),
		partitions: map[string]int{}, conns: map[net.Conn]bool{}}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *wireBroker) addr() string { return fmt.Sprintf("%s:%d", b.host, b.port) }

func (b *wireBroker) set(f func(b *wireBroker)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b)
}

// requests returns each metadata request's topics so far (nil: every
// topic).
func (b *wireBroker) requests() [][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.asked)
}

func (b *wireBroker) close() {
	close(b.done)
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

func (b *wireBroker) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns[c] = true
		b.mu.Unlock()
		b.wg.Add(1)
		go b.serve(c)
	}
}

func (b *wireBroker) serve(c net.Conn) {
	defer b.wg.Done()
	defer c.Close()
	for {
		ver, corr, _, msg, err := protocol.ReadRequest(c)
		if err != nil {
			return
		}
		var res protocol.Message
		var delay time.Duration
		switch req := msg.(type) {
		case *apiversions.Request:
			res = &apiversions.Response{ApiKeys: []apiversions.ApiKeyResponse{
				{ApiKey: int16(protocol.Produce), MinVersion: 3, MaxVersion: 8},
				{ApiKey: int16(protocol.Metadata), MinVersion: 1, MaxVersion: 8},
				{ApiKey: int16(protocol.ApiVersions), MinVersion: 0, MaxVersion: 2},
				{ApiKey: int16(protocol.CreateTopics), MinVersion: 0, MaxVersion: 4},
			}}
		case *createtopics.Request:
			created := &createtopics.Response{}
			b.mu.Lock()
			for _, t := range req.Topics {
				b.partitions[t.Name] = int(t.NumPartitions)
				created.Topics = append(created.Topics, createtopics.ResponseTopic{Name: t.Name})
			}
			b.mu.Unlock()
			res = created
		case *metadataapi.Request:
			res, delay = b.metadata(req.TopicNames)
		case *produceapi.Request:
			ok := &produceapi.Response{}
			for _, t := range req.Topics {
				rt := produceapi.ResponseTopic{Topic: t.Topic}
				for _, p := range t.Partitions {
					rt.Partitions = append(rt.Partitions, produceapi.ResponsePartition{Partition: p.Partition})
				}
				ok.Topics = append(ok.Topics, rt)
			}
			res = ok
		default:
			return
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-b.done:
				return
			}
		}
		if err := protocol.WriteResponse(c, ver, corr, res); err != nil {
			return
		}
	}
}

// metadata answers a metadata request for topics (nil: every topic) and
// returns how long to delay the answer.
func (b *wireBroker) metadata(topics []string) (*metadataapi.Response, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked = append(b.asked, slices.Clone(topics))
	res := &metadataapi.Response{
		Brokers:      []metadataapi.ResponseBroker{{NodeID: 1, Host: b.host, Port: b.port}},
		ControllerID: 1,
	}
	topic := func(name string, n int) metadataapi.ResponseTopic {
		t := metadataapi.ResponseTopic{Name: name}
		if n == 0 {
			t.ErrorCode = int16(kafka.UnknownTopicOrPartition)
		}
		for i := range n {
			t.Partitions = append(t.Partitions, metadataapi.ResponsePartition{PartitionIndex: int32(i), LeaderID: 1, ReplicaNodes: []int32{1}, IsrNodes: []int32{1}})
		}
		return t
	}
	if topics == nil {
		for name, n := range b.partitions {
			res.Topics = append(res.Topics, topic(name, n))
		}
		for i := range b.others {
			res.Topics = append(res.Topics, topic(fmt.Sprintf("other-%d", i), 3))
		}
		return res, b.slowAll
	}
	for _, name := range topics {
		res.Topics = append(res.Topics, topic(name, b.partitions[name]))
	}
	return res, b.slowNamed
}

// startWirePublisher runs a Publisher (New, with a real Transport whose
// MetadataTTL is ttl) against b and closes it when the test ends.
func startWirePublisher(t *testing.T, b *wireBroker, cfg Config, ttl time.Duration) (*Publisher, *metrics.Relay, *syncBuffer) {
	t.Helper()
	cfg.TopicTemplate = "{aggregate_type}"
	cfg.BackoffBase, cfg.BackoffMax = time.Millisecond, 20*time.Millisecond
	cfg.NoIdempotence = true
	m := metrics.New()
	var logs syncBuffer
	p := New([]string{b.addr()}, cfg, WithTransport(&kafka.Transport{ClientID: "outbox-relay", DialTimeout: time.Second, MetadataTTL: ttl}),
		WithMetrics(m.Publisher()), WithLogger(slog.New(zerolog.NewSlogHandler(zerolog.New(&logs)))))
	t.Cleanup(func() { _ = p.Close() })
	return p, m, &logs
}

// publishUntil publishes events of topic, one at a time and each
// acknowledged, until cond holds, failing after within.
func publishUntil(t *testing.T, p *Publisher, topic, what string, within time.Duration, cond func() bool) {
	t.Helper()
	var acks ackLog
	for i, deadline := 1, time.Now().Add(within); ; i++ {
		id := fmt.Sprintf("e%d", i)
		if err := p.Publish(context.Background(), testEvent(topic, fmt.Sprintf("agg-%d", i), id), acks.acker(id)); err != nil {
			t.Fatal(err)
		}
		acks.waitFor(t, i, time.Until(deadline)+5*time.Second)
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %d events in %s", what, i, within)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, past MetadataRefresh
	}
}

// counter sums the samples of the relay's metric name.
func counter(t *testing.T, m *metrics.Relay, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, s := range mf.GetMetric() {
				sum += s.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestMetadataAsksOnlyForOwnTopics is the issue's "9 all-topic requests in
// 5 s": kafka-go's Transport refreshes its cache for every topic of the
// cluster unless told which. Every metadata request the publisher's
// transport sends, its background refreshes included, must name topics,
// and only the one it writes to.
func TestMetadataAsksOnlyForOwnTopics(t *testing.T) {
	b := newWireBroker(t)
	b.set(func(b *wireBroker) { b.partitions["orders"], b.others = 2, 500 })
	p, _, _ := startWirePublisher(t, b, Config{}, 20*time.Millisecond)
	publishUntil(t, p, "orders", "ten metadata requests", 10*time.Second, func() bool { return len(b.requests()) >= 10 })

	var all int
	for _, topics := range b.requests() {
		if topics == nil {
			all++
			continue
		}
		for _, topic := range topics {
			if topic != "orders" {
				t.Errorf("a metadata request asked for %q (the publisher writes to orders only): %q", topic, topics)
			}
		}
	}
	if all > 0 {
		t.Fatalf("%d of %d metadata requests asked for every topic of the cluster", all, len(b.requests()))
	}
}

// TestMetadataSlowAnswerIsReported is the silent staleness: a
// broker whose metadata answers come later than kafka-go's MetadataTTL
// leaves the Transport's cache as it was, without an error. The router's
// own question must wait for its own deadline (MetadataTimeout) and then
// report the failure: a warning with the stage and topic, and a count by
// reason.
func TestMetadataSlowAnswerIsReported(t *testing.T) {
	b := newWireBroker(t)
	b.set(func(b *wireBroker) { b.partitions["orders"] = 1 })
	cfg := Config{PartitionRefresh: time.Millisecond, MetadataTimeout: 200 * time.Millisecond}
	p, m, logs := startWirePublisher(t, b, cfg, 50*time.Millisecond)
	publishUntil(t, p, "orders", "a first event", 5*time.Second, func() bool { return true })

	b.set(func(b *wireBroker) { b.partitions["orders"], b.slowAll, b.slowNamed = 4, time.Second, time.Second })
	const name = "outbox_relay_metadata_refresh_failures_total"
	publishUntil(t, p, "orders", "a counted metadata failure", 5*time.Second, func() bool { return counter(t, m, name) > 0 })
	out := logs.String()
	if !strings.Contains(out, "topic metadata refresh failed") || !strings.Contains(out, `"stage":"publish"`) ||
		!strings.Contains(out, `"reason":"timeout"`) || !strings.Contains(out, `"topic":"orders"`) {
		t.Fatalf("no warning naming the stage, topic and reason of the failed refresh:\n%s", out)
	}
}

// TestMetadataGrowthSeenOnBusyCluster is the shared cluster:
// answers for every topic take longer than MetadataTTL (thousands of
// topics), answers for named topics do not. Partitions added to the
// relay's topic must still be seen and used.
func TestMetadataGrowthSeenOnBusyCluster(t *testing.T) {
	b := newWireBroker(t)
	b.set(func(b *wireBroker) { b.partitions["orders"] = 1 })
	cfg := Config{PartitionRefresh: time.Millisecond}
	p, m, _ := startWirePublisher(t, b, cfg, 50*time.Millisecond)
	publishUntil(t, p, "orders", "a first event", 5*time.Second, func() bool { return true })

	b.set(func(b *wireBroker) { b.partitions["orders"], b.others, b.slowAll = 4, 2000, 200*time.Millisecond })
	publishUntil(t, p, "orders", "the switch to 4 partitions", 5*time.Second, func() bool {
		return counter(t, m, "outbox_relay_topic_partition_changes_total") == 1
	})
}

// TestMetadataCreatedTopicIsCovered: after CreateTopics kafka-go waits
// until its cache shows the topic, so a created topic must be covered by
// the cache before it is created, or that wait lasts until the
// question's deadline (MetadataTimeout).
func TestMetadataCreatedTopicIsCovered(t *testing.T) {
	b := newWireBroker(t)
	cfg := Config{CreateTopics: true, TopicPartitions: 3, MetadataTimeout: 5 * time.Second}
	p, _, _ := startWirePublisher(t, b, cfg, 50*time.Millisecond)
	start := time.Now()
	publishUntil(t, p, "created", "a first event", 10*time.Second, func() bool { return true })
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the first event of a created topic took %s: the wait after CreateTopics ran into the deadline", d)
	}
}
