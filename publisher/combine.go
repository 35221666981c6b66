package publisher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	produceapi "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
)

// Bounds of one combined produce request. The broker limits each record
// batch (message.max.bytes, which MaxBatchBytes respects) and the whole
// request (socket.request.max.bytes, 100 MiB by default): 8 MiB keeps a
// request far below the latter and its encoding cheap.
const (
	combineMaxBatches = 64
	combineMaxBytes   = 8 << 20
	// combineSenders is how many combined requests may be in flight at
	// once. More than one keeps the brokers busy while a response is on
	// its way; batches that arrive meanwhile travel together in the next.
	combineSenders = 3
	// combineFullBytes ends a linger early: a group this large gains
	// little from waiting (a draining backlog forms full batches).
	combineFullBytes = 256 << 10
)

// batch is one lane's partition batch handed to the combiner. The lane
// waits for err before it touches records again.
type batch struct {
	topic     string
	partition int
	// leader is the partition leader's broker id from the router's last
	// metadata, -1 when unknown; batches for different leaders cannot
	// share a request.
	leader int
	bytes  int
	// records is the partition's record batch, size-prefixed, as
	// kafkaproduce.AppendBatch encodes it.
	records []byte
	// last says no other batch is worth waiting for: the position record
	// of a closed range, after every event of it was answered. It does
	// not linger.
	last bool
	err  chan error
}

// combiner merges the batches that lanes hand it at about the same moment
// into one multi-partition produce request per leader, the way the Java
// producer sends one request per broker. Each lane still has at most one
// batch in flight, so per-partition order is the lane's as before; what
// changes is the number of requests: at live rates one partition batch is
// often a handful of records, and a request per partition per round trip
// cost the broker (and the relay) more CPU than the records themselves.
//
// One collector forms groups: it takes a batch, waits up to linger for
// the other lanes' batches (like the producer's linger.ms), and hands the
// group to one of combineSenders senders. While every sender is busy the
// batches wait in their lanes and grow, so a loaded relay sends fewer,
// larger requests; linger 0 sends whatever is ready at once.
type combiner struct {
	ctx     context.Context
	rt      kafka.RoundTripper
	addr    net.Addr
	timeout time.Duration
	linger  time.Duration
	// lanes reports how many lanes exist: once each has a batch in the
	// group, nothing more can come and lingering would only wait.
	lanes  func() int
	in     chan *batch
	groups chan []*batch
	// transactionalID and beforeSend are set in exactly-once mode: every
	// produce request names the transactional id, and beforeSend adds
	// the request's partitions to the open transaction first. It answers
	// nil when the request may go, else an error per batch (each batch
	// gets its own: one topic's refusal must not fail another's events).
	transactionalID string
	beforeSend      func(ctx context.Context, bs []*batch) []error
	// unanswered is set once a produce request ended without an answer
	// (its deadline passed, the publisher closed, the connection broke):
	// the broker may still append its batches later. In exactly-once
	// mode an EndTxn(abort) under the same epoch must not follow then
	// (see transactions.abandon).
	unanswered atomic.Bool
}

func newCombiner(ctx context.Context, rt kafka.RoundTripper, addr net.Addr, timeout, linger time.Duration, lanes func() int) *combiner {
	return &combiner{ctx: ctx, rt: rt, addr: addr, timeout: timeout, linger: max(linger, 0), lanes: lanes,
		in: make(chan *batch), groups: make(chan []*batch)}
}

// full reports whether lingering for more batches is pointless.
func (c *combiner) full(group []*batch, size int) bool {
	return size >= combineFullBytes || len(group) >= c.lanes()
}

// run starts the collector and the senders; wg tracks them.
func (c *combiner) run(wg *sync.WaitGroup) {
	wg.Add(1 + combineSenders)
	go func() {
		defer wg.Done()
		c.collect()
	}()
	for range combineSenders {
		go func() {
			defer wg.Done()
			for {
				select {
				case g := <-c.groups:
					c.send(g)
				case <-c.ctx.Done():
					return
				}
			}
		}()
	}
}

// produce sends b (as part of a combined request) and returns its
// partition's outcome. Once the collector has taken b, produce waits for
// its answer even while closing, so the caller can reuse b's records
// safely.
func (c *combiner) produce(b *batch) error {
	b.err = make(chan error, 1)
	select {
	case c.in <- b:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	return <-b.err
}

// collect forms groups of batches and hands them to the senders. A group
// it has taken is always answered: on close, with the context's error.
func (c *combiner) collect() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var group []*batch
		select {
		case b := <-c.in:
			group = append(group, b)
		case <-c.ctx.Done():
			return
		}
		size := group[0].bytes
		lingering := c.linger > 0 && !c.full(group, size) && !group[0].last
		if lingering {
			timer.Reset(c.linger)
		}
	more:
		for len(group) < combineMaxBatches && size < combineMaxBytes {
			if !lingering {
				select {
				case b := <-c.in:
					group = append(group, b)
					size += b.bytes
					continue
				default:
					break more
				}
			}
			if c.full(group, size) {
				lingering = false
				continue // take what is ready without waiting
			}
			select {
			case b := <-c.in:
				group = append(group, b)
				size += b.bytes
			case <-timer.C:
				lingering = false
				break more
			case <-c.ctx.Done():
				break more
			}
		}
		timer.Stop() // no drain needed: since Go 1.23 Reset discards a stale tick
		select {
		case c.groups <- group:
		case <-c.ctx.Done():
			for _, b := range group {
				b.err <- c.ctx.Err()
			}
			return
		}
	}
}

// send answers every batch of group: one request per leader, concurrently
// when there are several.
func (c *combiner) send(group []*batch) {
	byLeader := map[int][]*batch{}
	var leaders []int
	for _, b := range group {
		if _, ok := byLeader[b.leader]; !ok {
			leaders = append(leaders, b.leader)
		}
		byLeader[b.leader] = append(byLeader[b.leader], b)
	}
	if len(leaders) == 1 {
		c.request(group)
		return
	}
	var wg sync.WaitGroup
	for _, l := range leaders {
		wg.Add(1)
		go func(bs []*batch) {
			defer wg.Done()
			c.request(bs)
		}(byLeader[l])
	}
	wg.Wait()
}

// request sends bs as one produce request. If kafka-go's metadata puts
// their partitions on different leaders than the router's did (a leader
// moved since), they are sent one request each instead.
func (c *combiner) request(bs []*batch) {
	errs := c.roundTrip(bs)
	var mismatch *rawproduce.Error
	if len(bs) > 1 && errors.As(errs[0], &mismatch) {
		for _, b := range bs {
			b.err <- c.roundTrip([]*batch{b})[0]
		}
		return
	}
	for i, b := range bs {
		b.err <- errs[i]
	}
}

// roundTrip sends bs in one acks=all produce request and returns each
// batch's outcome, in order.
func (c *combiner) roundTrip(bs []*batch) []error {
	errs := make([]error, len(bs))
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	if c.beforeSend != nil {
		if berrs := c.beforeSend(ctx, bs); berrs != nil {
			return berrs
		}
	}
	req := &rawproduce.Request{Acks: int16(kafka.RequireAll), Timeout: int32(c.timeout / time.Millisecond), TransactionalID: c.transactionalID}
	topicIndex := map[string]int{}
	for _, b := range bs {
		i, ok := topicIndex[b.topic]
		if !ok {
			i = len(req.Topics)
			topicIndex[b.topic] = i
			req.Topics = append(req.Topics, rawproduce.RequestTopic{Topic: b.topic})
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rawproduce.RequestPartition{
			Partition: int32(b.partition),
			RecordSet: protocol.RawRecordSet{Reader: bytes.NewReader(b.records)},
		})
	}
	msg, err := c.rt.RoundTrip(ctx, c.addr, req)
	if err != nil {
		c.unanswered.Store(true)
	}
	if err == nil {
		res, ok := msg.(*produceapi.Response)
		if !ok {
			err = fmt.Errorf("produce: unexpected response %T", msg)
		} else {
			mapResponse(res, bs, errs)
			return errs
		}
	}
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// mapResponse sets each batch's outcome from its partition's entry in res.
func mapResponse(res *produceapi.Response, bs []*batch, errs []error) {
	type tp struct {
		topic     string
		partition int32
	}
	parts := make(map[tp]*produceapi.ResponsePartition, len(bs))
	for i := range res.Topics {
		t := &res.Topics[i]
		for j := range t.Partitions {
			parts[tp{t.Topic, t.Partitions[j].Partition}] = &t.Partitions[j]
		}
	}
	for i, b := range bs {
		p := parts[tp{b.topic, int32(b.partition)}]
		switch {
		case p == nil:
			errs[i] = fmt.Errorf("produce: no response for %s[%d]", b.topic, b.partition)
		case p.ErrorCode != 0:
			errs[i] = kafka.Error(p.ErrorCode)
			if p.ErrorMessage != "" {
				errs[i] = fmt.Errorf("%w: %s", kafka.Error(p.ErrorCode), p.ErrorMessage)
			}
		case len(p.RecordErrors) > 0:
			errs[i] = fmt.Errorf("record rejected: %s", p.RecordErrors[0].BatchIndexErrorMessage)
		}
	}
}
