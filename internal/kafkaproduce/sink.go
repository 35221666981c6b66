package kafkaproduce

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

	"github.com/outbox-relay/outbox-relay/internal/startstop"
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

// Batch is one partition's record batch handed to the Sink. Its sender
// waits for Produce to return before it touches Records again.
type Batch struct {
	Topic     string
	Partition int
	// Leader is the partition leader's broker id from the caller's last
	// metadata, -1 when unknown; batches for different leaders cannot
	// share a request.
	Leader int
	Bytes  int
	// Records is the partition's record batch, size-prefixed, as
	// AppendBatch encodes it.
	Records []byte
	// Last says no other batch is worth waiting for (the position record
	// of a closed exactly-once range, after every event of it was
	// answered): it does not linger.
	Last bool
	err  chan error
}

// Sink merges the batches that partitions' senders (the publisher's
// lanes) hand it at about the same moment into one multi-partition
// produce request per leader, the way the Java producer sends one request
// per broker (franz-go's sink). Each sender has at most one batch in
// flight, so per-partition order is the sender's; what the Sink changes is
// the number of requests: at live rates one partition batch is
// often a handful of records, and a request per partition per round trip
// cost the broker (and the relay) more CPU than the records themselves.
//
// One collector forms groups: it takes a batch, waits up to linger for
// the other lanes' batches (like the producer's linger.ms), and hands the
// group to one of combineSenders senders. While every sender is busy the
// batches wait in their lanes and grow, so a loaded relay sends fewer,
// larger requests; linger 0 sends whatever is ready at once.
type Sink struct {
	ctx     context.Context
	rt      kafka.RoundTripper
	addr    net.Addr
	timeout time.Duration
	linger  time.Duration
	// lanes reports how many lanes exist: once each has a batch in the
	// group, nothing more can come and lingering would only wait.
	lanes  func() int
	in     chan *Batch
	groups chan []*Batch
	// loops are the collector (collect) and the senders (sendGroups),
	// each a startstop service run by Start under ctx and stopped,
	// waiting for it, by Stop.
	loops []*startstop.Service
	// TransactionalID and BeforeSend are set in exactly-once mode, before
	// Run: every produce request names the transactional id, and
	// BeforeSend adds the request's partitions to the open transaction
	// first. It answers nil when the request may go, else an error per
	// batch (each batch gets its own: one topic's refusal must not fail
	// another's events).
	TransactionalID string
	BeforeSend      func(ctx context.Context, bs []*Batch) []error
	// unanswered is set once a produce request ended without an answer
	// (Unanswered).
	unanswered atomic.Bool
}

// NewSink returns a sink sending over rt to the brokers at addr, each
// request with timeout, batches lingering up to linger for others; lanes
// reports how many senders exist (once each has a batch in a group,
// nothing more can come). It sends nothing until Start.
func NewSink(ctx context.Context, rt kafka.RoundTripper, addr net.Addr, timeout, linger time.Duration, lanes func() int) *Sink {
	c := &Sink{ctx: ctx, rt: rt, addr: addr, timeout: timeout, linger: max(linger, 0), lanes: lanes,
		in: make(chan *Batch), groups: make(chan []*Batch)}
	c.loops = append(c.loops, startstop.New(c.collect))
	for range combineSenders {
		c.loops = append(c.loops, startstop.New(c.sendGroups))
	}
	return c
}

// Unanswered reports whether a produce request ended without an answer
// (its deadline passed, the sink closed, the connection broke): the broker
// may still append its batches later. In exactly-once mode an
// EndTxn(abort) under the same epoch must not follow then.
func (c *Sink) Unanswered() bool { return c.unanswered.Load() }

// full reports whether lingering for more batches is pointless.
func (c *Sink) full(group []*Batch, size int) bool {
	return size >= combineFullBytes || len(group) >= c.lanes()
}

// Start starts the collector and the senders under the sink's context.
func (c *Sink) Start() {
	for _, l := range c.loops {
		l.Start(c.ctx)
	}
}

// Stop stops the senders and the collector and returns once they have
// returned; every batch the collector took is answered by then. Call it
// after the sink's context ended (Publisher.Close cancels it first): a
// Produce waiting to hand a batch over returns only then.
func (c *Sink) Stop() { startstop.StopAll(c.loops...) }

// sendGroups is a sender: it sends the groups the collector forms until
// ctx ends.
func (c *Sink) sendGroups(ctx context.Context) {
	for {
		select {
		case g := <-c.groups:
			c.send(g)
		case <-ctx.Done():
			return
		}
	}
}

// Produce sends b (as part of a combined request) and returns its
// partition's outcome. Once the collector has taken b, Produce waits for
// its answer even while closing, so the caller can reuse b's records
// safely.
func (c *Sink) Produce(b *Batch) error {
	b.err = make(chan error, 1)
	select {
	case c.in <- b:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	return <-b.err
}

// collect forms groups of batches and hands them to the senders until
// ctx ends. A group it has taken is always answered: on close, with the
// context's error.
func (c *Sink) collect(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var group []*Batch
		select {
		case b := <-c.in:
			group = append(group, b)
		case <-ctx.Done():
			return
		}
		size := group[0].Bytes
		lingering := c.linger > 0 && !c.full(group, size) && !group[0].Last
		if lingering {
			timer.Reset(c.linger)
		}
	more:
		for len(group) < combineMaxBatches && size < combineMaxBytes {
			if !lingering {
				select {
				case b := <-c.in:
					group = append(group, b)
					size += b.Bytes
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
				size += b.Bytes
			case <-timer.C:
				lingering = false
				break more
			case <-ctx.Done():
				break more
			}
		}
		timer.Stop() // no drain needed: since Go 1.23 Reset discards a stale tick
		select {
		case c.groups <- group:
		case <-ctx.Done():
			for _, b := range group {
				b.err <- ctx.Err()
			}
			return
		}
	}
}

// send answers every batch of group: one request per leader, concurrently
// when there are several.
func (c *Sink) send(group []*Batch) {
	byLeader := map[int][]*Batch{}
	var leaders []int
	for _, b := range group {
		if _, ok := byLeader[b.Leader]; !ok {
			leaders = append(leaders, b.Leader)
		}
		byLeader[b.Leader] = append(byLeader[b.Leader], b)
	}
	if len(leaders) == 1 {
		c.request(group)
		return
	}
	var wg sync.WaitGroup // per leader, joined here
	for _, l := range leaders {
		bs := byLeader[l]
		wg.Go(func() { c.request(bs) })
	}
	wg.Wait()
}

// request sends bs as one produce request. If kafka-go's metadata puts
// their partitions on different leaders than the router's did (a leader
// moved since), they are sent one request each instead.
func (c *Sink) request(bs []*Batch) {
	errs := c.roundTrip(bs)
	var mismatch *rawproduce.Error
	if len(bs) > 1 && errors.As(errs[0], &mismatch) {
		for _, b := range bs {
			b.err <- c.roundTrip([]*Batch{b})[0]
		}
		return
	}
	for i, b := range bs {
		b.err <- errs[i]
	}
}

// roundTrip sends bs in one acks=all produce request and returns each
// batch's outcome, in order.
func (c *Sink) roundTrip(bs []*Batch) []error {
	errs := make([]error, len(bs))
	ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
	defer cancel()
	if c.BeforeSend != nil {
		if berrs := c.BeforeSend(ctx, bs); berrs != nil {
			return berrs
		}
	}
	req := &rawproduce.Request{Acks: int16(kafka.RequireAll), Timeout: int32(c.timeout / time.Millisecond), TransactionalID: c.TransactionalID}
	topicIndex := map[string]int{}
	for _, b := range bs {
		i, ok := topicIndex[b.Topic]
		if !ok {
			i = len(req.Topics)
			topicIndex[b.Topic] = i
			req.Topics = append(req.Topics, rawproduce.RequestTopic{Topic: b.Topic})
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rawproduce.RequestPartition{
			Partition: int32(b.Partition),
			RecordSet: protocol.RawRecordSet{Reader: bytes.NewReader(b.Records)},
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
func mapResponse(res *produceapi.Response, bs []*Batch, errs []error) {
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
		p := parts[tp{b.Topic, int32(b.Partition)}]
		switch {
		case p == nil:
			errs[i] = fmt.Errorf("produce: no response for %s[%d]", b.Topic, b.Partition)
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
