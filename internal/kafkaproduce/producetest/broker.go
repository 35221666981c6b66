// Package producetest is a fake Kafka broker for produce requests, whose
// answers a test scripts: the tests of kafkaproduce's sink and of the
// publisher that sends through it use it instead of a real broker.
package producetest

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/segmentio/kafka-go/protocol"
	produceapi "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
)

// Broker answers produce requests as a kafka.RoundTripper: Gate (if set)
// holds every request until closed; Fail (if set) fails a request before
// any answer; Reply decides each partition's entry (nil: left out of the
// answer). Set the fields before the first request.
type Broker struct {
	Gate  chan struct{}
	Fail  func(req *rawproduce.Request) error
	Reply func(topic string, partition int32) *produceapi.ResponsePartition

	mu       sync.Mutex
	requests [][]string // "topic[partition]" per request
}

// RoundTrip answers one produce request (kafka.RoundTripper).
func (f *Broker) RoundTrip(ctx context.Context, _ net.Addr, msg protocol.Message) (protocol.Message, error) {
	req := msg.(*rawproduce.Request)
	var parts []string
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			parts = append(parts, fmt.Sprintf("%s[%d]", t.Topic, p.Partition))
		}
	}
	f.mu.Lock()
	f.requests = append(f.requests, parts)
	gate, fail := f.Gate, f.Fail
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		if err := fail(req); err != nil {
			return nil, err
		}
	}
	res := &produceapi.Response{}
	for _, t := range req.Topics {
		rt := produceapi.ResponseTopic{Topic: t.Topic}
		for _, p := range t.Partitions {
			if rp := f.Reply(t.Topic, p.Partition); rp != nil {
				rp.Partition = p.Partition
				rt.Partitions = append(rt.Partitions, *rp)
			}
		}
		res.Topics = append(res.Topics, rt)
	}
	return res, nil
}

// Sent lists each request's partitions, "topic[partition]", in order.
func (f *Broker) Sent() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.requests...)
}
