package publisher

// This file holds how the publisher learns a topic's layout: its own
// metadata questions, sent past kafka-go's cache with their own deadline,
// and the transport whose cache (which routes produce requests) covers
// only the relay's topics.
//
// kafka-go's Transport answers every Metadata request from a cache that
// a goroutine per connection pool refreshes at random moments within
// MetadataTTL; without Transport.MetadataTopics each refresh asks for
// every topic of the cluster, and a refresh slower than MetadataTTL is
// dropped without a word, the old layout kept. On a shared cluster with
// thousands of topics a relay could then never see added partitions or
// moved leaders, and nothing would say so. Hence:
//
//   - the router's and the positions topic's questions are a
//     metadataQuestion, which the Transport does not recognise as a
//     Metadata request and so sends to a broker, bounded by
//     Config.MetadataTimeout; a failure is logged and counted
//     (Metrics.MetadataRefreshFailed);
//   - the Transport the publisher sends through is a topicTransport: a
//     copy of Config.Transport whose MetadataTopics are the topics the
//     publisher writes to, replaced by a wider copy when a topic is
//     first seen.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	metadataapi "github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
)

// metadataQuestion is a Metadata request for Topics that kafka-go's
// Transport sends to a broker instead of answering from its cache: the
// Transport intercepts only *metadata.Request, and a
// protocol.RawExchanger writes and reads its own exchange on the
// connection the Transport picked (its control connection to a bootstrap
// broker, with the Transport's TLS and SASL), at the version negotiated
// for Metadata. The deadline of the caller's context applies to the
// connection.
type metadataQuestion struct {
	Topics   []string
	ClientID string
	version  int16 // set by Required, on the connection's goroutine
}

// metadataAnswer is the broker's answer to a metadataQuestion. It is not
// a *metadata.Response, so the Transport does not take it for an answer
// to its own kind of request.
type metadataAnswer struct{ *metadataapi.Response }

func (*metadataQuestion) ApiKey() protocol.ApiKey { return protocol.Metadata }
func (metadataAnswer) ApiKey() protocol.ApiKey    { return protocol.Metadata }

// Required notes the connection's Metadata version and asks for the raw
// exchange, always (protocol.RawExchanger).
func (q *metadataQuestion) Required(versions map[protocol.ApiKey]int16) bool {
	q.version = versions[protocol.Metadata]
	return true
}

// questionCorrelation is the correlation id of every metadataQuestion:
// the Transport sends one request at a time per connection.
const questionCorrelation = 0x6f72

// RawExchange sends the question and reads the answer
// (protocol.RawExchanger).
func (q *metadataQuestion) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	topics := q.Topics
	if topics == nil {
		topics = []string{} // nil asks for every topic
	}
	if err := protocol.WriteRequest(rw, q.version, questionCorrelation, q.ClientID, &metadataapi.Request{TopicNames: topics}); err != nil {
		return nil, err
	}
	id, res, err := protocol.ReadResponse(rw, protocol.Metadata, q.version)
	if err != nil {
		return nil, err
	}
	if id != questionCorrelation {
		return nil, fmt.Errorf("metadata: correlation id %d in the answer, want %d", id, questionCorrelation)
	}
	md, ok := res.(*metadataapi.Response)
	if !ok {
		return nil, fmt.Errorf("metadata: unexpected answer %T", res)
	}
	return metadataAnswer{md}, nil
}

// askMetadata asks a broker, past the transport's cache, for topic's
// partitions, waiting at most MetadataTimeout.
func (p *Publisher) askMetadata(ctx context.Context, topic string) (*metadataapi.ResponseTopic, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.MetadataTimeout)
	defer cancel()
	q := &metadataQuestion{Topics: []string{topic}}
	if p.cfg.Transport != nil {
		q.ClientID = p.cfg.Transport.ClientID
	}
	res, err := p.client.Transport.RoundTrip(ctx, p.client.Addr, q)
	if err != nil {
		// The deadline ends the wait as a context error or, on the
		// connection (whose deadline is ctx's), as an i/o timeout, which
		// may come a moment before ctx's own timer.
		var nerr net.Error
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.As(err, &nerr) && nerr.Timeout()
		if timedOut && p.ctx.Err() == nil {
			return nil, fmt.Errorf("topic %s: no metadata answer within %s: %w (%w)", topic, p.cfg.MetadataTimeout, context.DeadlineExceeded, err)
		}
		return nil, fmt.Errorf("topic %s: metadata: %w", topic, err)
	}
	ans, ok := res.(metadataAnswer)
	if !ok {
		return nil, fmt.Errorf("topic %s: metadata: unexpected answer %T", topic, res)
	}
	brokers := make(map[int32]bool, len(ans.Brokers))
	for _, b := range ans.Brokers {
		brokers[b.NodeID] = true
	}
	for i := range ans.Topics {
		if t := &ans.Topics[i]; t.Name == topic {
			for j := range t.Partitions {
				if !brokers[t.Partitions[j].LeaderID] {
					t.Partitions[j].LeaderID = -1 // no leader, or one the answer does not list
				}
			}
			return t, nil
		}
	}
	return &metadataapi.ResponseTopic{Name: topic, ErrorCode: int16(kafka.UnknownTopicOrPartition)}, nil
}

// topicTransport is the publisher's kafka.RoundTripper: a copy of
// Config.Transport (kafkaconn.WithMetadataTopics) whose metadata cache,
// which kafka-go routes produce requests by, covers only the topics the
// publisher writes to. A topic seen for the first time (add) makes a
// wider copy the current one; the previous copy's pools are closed once
// no request of the publisher uses them (retire), so none lingers with
// its refresh goroutine.
type topicTransport struct {
	base *kafka.Transport

	mu     sync.Mutex // serialises add
	topics map[string]bool
	cur    atomic.Pointer[transportGen]
}

// transportGen is one copy of the transport and how many requests are
// using it.
type transportGen struct {
	tr      *kafka.Transport
	users   atomic.Int64
	retired atomic.Bool
}

func newTopicTransport(base *kafka.Transport, topics ...string) *topicTransport {
	t := &topicTransport{base: base, topics: map[string]bool{}}
	for _, topic := range topics {
		t.topics[topic] = true
	}
	t.cur.Store(&transportGen{tr: kafkaconn.WithMetadataTopics(base, t.list())})
	return t
}

func (t *topicTransport) list() []string {
	ts := make([]string, 0, len(t.topics))
	for topic := range t.topics {
		ts = append(ts, topic)
	}
	return ts
}

// RoundTrip sends msg over the current copy (kafka.RoundTripper).
func (t *topicTransport) RoundTrip(ctx context.Context, addr net.Addr, msg protocol.Message) (protocol.Message, error) {
	g := t.acquire()
	defer g.release()
	return g.tr.RoundTrip(ctx, addr, msg)
}

// acquire returns the current copy, counted as used until release.
func (t *topicTransport) acquire() *transportGen {
	for {
		g := t.cur.Load()
		g.users.Add(1)
		if t.cur.Load() == g {
			return g
		}
		g.release() // replaced meanwhile: use the new one
	}
}

func (g *transportGen) release() {
	if g.users.Add(-1) == 0 && g.retired.Load() {
		g.tr.CloseIdleConnections()
	}
}

// retire closes g's pools now if no request uses it, else when the last
// one ends (release); closing twice is harmless.
func (g *transportGen) retire() {
	g.retired.Store(true)
	if g.users.Load() == 0 {
		g.tr.CloseIdleConnections()
	}
}

// add makes topic part of the cached metadata, reporting whether it was
// new. A new topic costs new connections: the copy that covers it starts
// its own pools.
func (t *topicTransport) add(topic string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.topics[topic] {
		return false
	}
	t.topics[topic] = true
	old := t.cur.Swap(&transportGen{tr: kafkaconn.WithMetadataTopics(t.base, t.list())})
	old.retire()
	return true
}

// CloseIdleConnections closes the current copy's pools: its next request
// starts a pool, whose first step is a metadata request.
func (t *topicTransport) CloseIdleConnections() {
	g := t.acquire()
	g.tr.CloseIdleConnections()
	g.release()
}
