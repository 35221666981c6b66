package kafkaproduce

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/segmentio/kafka-go"
	produceapi "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce/producetest"
)

func testBatch(topic string, partition, leader int) *Batch {
	return &Batch{Topic: topic, Partition: partition, Leader: leader, Bytes: 10,
		Records: AppendBatch(nil, []*kafka.Message{{Key: []byte("k"), Value: []byte("v")}}, NoStamp, time.Now())}
}

// produceAll submits bs concurrently and returns their outcomes by index.
func produceAll(c *Sink, bs []*Batch) []error {
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Produce(b)
		}()
	}
	wg.Wait()
	return errs
}

func startCombiner(t *testing.T, f *producetest.Broker, linger time.Duration) *Sink {
	ctx, cancel := context.WithCancel(context.Background())
	c := NewSink(ctx, f, kafka.TCP("127.0.0.1:1"), 5*time.Second, linger, func() int { return 1000 })
	c.Start()
	t.Cleanup(func() { cancel(); c.Stop() })
	return c
}

// TestSinkMergesAndMapsErrors: batches handed over while every sender
// is busy travel together, and each gets its own partition's outcome.
func TestSinkMergesAndMapsErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &producetest.Broker{Gate: make(chan struct{}), Reply: func(topic string, p int32) *produceapi.ResponsePartition {
			switch {
			case topic == "b" && p == 1:
				return &produceapi.ResponsePartition{ErrorCode: int16(kafka.NotLeaderForPartition)}
			case topic == "b" && p == 2:
				return &produceapi.ResponsePartition{RecordErrors: []produceapi.ResponseError{{BatchIndexErrorMessage: "bad record"}}}
			case topic == "b" && p == 3:
				return nil
			}
			return &produceapi.ResponsePartition{}
		}}
		c := startCombiner(t, f, 0)

		// Occupy every sender, one request each, then queue more batches
		// behind them.
		busy := make([]*Batch, combineSenders)
		done := make(chan error, combineSenders)
		for i := range busy {
			busy[i] = testBatch("a", i, 1)
			go func() { done <- c.Produce(busy[i]) }()
			synctest.Wait() // the batch went out and its request waits at the gate
			if len(f.Sent()) != i+1 {
				t.Fatalf("senders took %d requests, want %d", len(f.Sent()), i+1)
			}
		}
		queued := []*Batch{testBatch("b", 0, 1), testBatch("b", 1, 1), testBatch("b", 2, 1), testBatch("b", 3, 1), testBatch("c", 0, 1)}
		queuedDone := make(chan []error, 1) // buffered: a failed check must not strand the sender in the bubble
		go func() { queuedDone <- produceAll(c, queued) }()
		synctest.Wait() // let them reach the channel: all are blocked handing over or in the collector
		close(f.Gate)
		for range busy {
			if err := <-done; err != nil {
				t.Fatalf("busy batch: %v", err)
			}
		}
		errs := <-queuedDone

		if n := len(f.Sent()); n >= combineSenders+len(queued) {
			t.Errorf("%d requests for %d batches: nothing was combined (%v)", n, combineSenders+len(queued), f.Sent())
		}
		if errs[0] != nil || errs[4] != nil {
			t.Errorf("acknowledged partitions got errors: %v, %v", errs[0], errs[4])
		}
		if !errors.Is(errs[1], kafka.NotLeaderForPartition) {
			t.Errorf("b[1]: %v, want NotLeaderForPartition", errs[1])
		}
		if errs[2] == nil || !strings.Contains(errs[2].Error(), "bad record") {
			t.Errorf("b[2]: %v, want the record error", errs[2])
		}
		if errs[3] == nil || !strings.Contains(errs[3].Error(), "no response for b[3]") {
			t.Errorf("b[3]: %v, want a missing-response error", errs[3])
		}
	})
}

// TestSinkSplitsByLeader: batches of different leaders never share a
// request; a leader mismatch found by the transport falls back to one
// request per batch.
func TestSinkSplitsByLeader(t *testing.T) {
	ok := func(string, int32) *produceapi.ResponsePartition { return &produceapi.ResponsePartition{} }
	f := &producetest.Broker{Reply: ok}
	c := startCombiner(t, f, 0)
	group := []*Batch{testBatch("a", 0, 1), testBatch("a", 1, 2), testBatch("a", 2, 1)}
	for i := range group {
		group[i].err = make(chan error, 1)
	}
	c.send(group)
	for i, b := range group {
		if err := <-b.err; err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	got := fmt.Sprint(f.Sent())
	if len(f.Sent()) != 2 || !(strings.Contains(got, "[a[0] a[2]]") && strings.Contains(got, "[a[1]]")) {
		t.Fatalf("requests %s, want a[0]+a[2] and a[1] apart", got)
	}

	f2 := &producetest.Broker{Reply: ok, Fail: func(req *rawproduce.Request) error {
		if len(req.Topics[0].Partitions) > 1 {
			return rawproduce.NewError(errors.New("mismatching leaders (1!=2)"))
		}
		return nil
	}}
	c2 := startCombiner(t, f2, 0)
	pair := []*Batch{testBatch("a", 0, 1), testBatch("a", 1, 1)}
	for i := range pair {
		pair[i].err = make(chan error, 1)
	}
	c2.send(pair)
	for i, b := range pair {
		if err := <-b.err; err != nil {
			t.Fatalf("after the fallback, batch %d: %v", i, err)
		}
	}
	if s := f2.Sent(); len(s) != 3 || len(s[1]) != 1 || len(s[2]) != 1 {
		t.Fatalf("requests %v, want the combined one then one per batch", s)
	}
}

// TestSinkLinger: a batch waits up to the linger for others to share
// its request; without one it goes alone.
func TestSinkLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ok := func(string, int32) *produceapi.ResponsePartition { return &produceapi.ResponsePartition{} }
		for _, tc := range []struct {
			linger time.Duration
			want   int
		}{{200 * time.Millisecond, 1}, {0, 2}} {
			f := &producetest.Broker{Reply: ok}
			c := startCombiner(t, f, tc.linger)
			errs := make(chan error, 2)
			go func() { errs <- c.Produce(testBatch("a", 0, 1)) }()
			time.Sleep(30 * time.Millisecond) // virtual time: well within the 200ms linger
			go func() { errs <- c.Produce(testBatch("a", 1, 1)) }()
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			if n := len(f.Sent()); n != tc.want {
				t.Errorf("linger %s: %d requests %v, want %d", tc.linger, n, f.Sent(), tc.want)
			}
		}
	})
}

// TestSinkLingerEndsWhenFull: with every lane's batch in, or a large
// group, the collector does not wait out the linger.
func TestSinkLingerEndsWhenFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ok := func(string, int32) *produceapi.ResponsePartition { return &produceapi.ResponsePartition{} }
		ctx, cancel := context.WithCancel(context.Background())
		f := &producetest.Broker{Reply: ok}
		c := NewSink(ctx, f, kafka.TCP("127.0.0.1:1"), 5*time.Second, time.Hour, func() int { return 2 })
		c.Start()
		defer func() { cancel(); c.Stop() }()
		t0 := time.Now()
		if errs := produceAll(c, []*Batch{testBatch("a", 0, 1), testBatch("a", 1, 1)}); errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		big := testBatch("a", 0, 1)
		big.Bytes = combineFullBytes
		if err := c.Produce(big); err != nil {
			t.Fatal(err)
		}
		// Virtual time: a collector that waited out the linger shows as
		// an hour here, at once.
		if d := time.Since(t0); d > 10*time.Second {
			t.Fatalf("took %s: the collector waited out the linger", d)
		}
	})
}

// TestSinkClosing: a batch handed over after the publisher closed is
// refused, not lost in a channel.
func TestSinkClosing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := NewSink(ctx, &producetest.Broker{}, kafka.TCP("127.0.0.1:1"), time.Second, 0, func() int { return 1000 })
	c.Start()
	cancel()
	c.Stop()
	if err := c.Produce(testBatch("a", 0, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("produce after close: %v", err)
	}
}

// TestSinkLastBatchDoesNotLinger: the position record of a closed
// range (Batch.Last) has nothing to wait for and goes at once; before, it
// waited out the linger on every commit, 5 of the about 13 ms a commit
// took at 1,000 events/s (docs/benchmarks.md, "Issue 35").
func TestSinkLastBatchDoesNotLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ok := func(string, int32) *produceapi.ResponsePartition { return &produceapi.ResponsePartition{} }
		c := startCombiner(t, &producetest.Broker{Reply: ok}, time.Hour)
		b := testBatch("positions", 0, 1)
		b.Last = true
		t0 := time.Now()
		if err := c.Produce(b); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d > 0 {
			t.Fatalf("the last batch waited %s (virtual time) for others", d)
		}
	})
}
