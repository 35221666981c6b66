package publisher

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
	produceapi "github.com/segmentio/kafka-go/protocol/produce"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce/producetest"
)

// syncBuffer is a log sink safe for the publisher's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// partitionBroker is a producetest.Broker whose partitions listed in refuse answer
// with that error code until released.
func partitionBroker() (*producetest.Broker, *sync.Map) {
	var refuse sync.Map // "topic[partition]" -> kafka.Error
	f := &producetest.Broker{Reply: func(topic string, p int32) *produceapi.ResponsePartition {
		if code, ok := refuse.Load(fmt.Sprintf("%s[%d]", topic, p)); ok {
			return &produceapi.ResponsePartition{ErrorCode: int16(code.(kafka.Error))}
		}
		return &produceapi.ResponsePartition{}
	}}
	return f, &refuse
}

// requestsTo counts the produce requests that carried topic[partition].
func requestsTo(f *producetest.Broker, tp string) int {
	n := 0
	for _, req := range f.Sent() {
		if slices.Contains(req, tp) {
			n++
		}
	}
	return n
}

// waitUntil polls cond until it holds, failing after within. In a
// synctest bubble the poll interval and the deadline are virtual time.
func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(time.Millisecond) // poll interval (virtual time inside a bubble)
	}
}

// TestPartitionGrowthKeepsKeyOrder is the reordering: e1 of
// aggregate A is being retried on its partition when partitions are added
// and A now hashes to a new one. e2 of A must not be sent under the new
// count (where nothing holds it back) before e1 is acknowledged; once e1
// is, the router switches, logs the counts and counts the change.
func TestPartitionGrowthKeepsKeyOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, refuse := partitionBroker()
		c := newFakeCluster(f)
		c.setPartitions("grow", 1)
		var logs syncBuffer
		p, m := startPublisher(t, config{Config: Config{PartitionRefresh: 10 * time.Millisecond}}, slog.New(zerolog.NewSlogHandler(zerolog.New(&logs))), c)
		key, to := keyMoving(0, 1, 4)

		refuse.Store("grow[0]", kafka.NotLeaderForPartition)
		var acks ackLog
		ctx := context.Background()
		if err := p.Publish(ctx, testEvent("grow", key, "e1"), acks.acker("e1")); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "e1 retried on grow[0]", 5*time.Second, func() bool { return requestsTo(f, "grow[0]") >= 2 })

		c.setPartitions("grow", 4)
		time.Sleep(30 * time.Millisecond) // virtual time: past the refresh interval
		if err := p.Publish(ctx, testEvent("grow", key, "e2"), acks.acker("e2")); err != nil {
			t.Fatal(err)
		}
		// Virtual time: 30 refresh intervals and many retries of e1, with
		// every goroutine run to a standstill before the clock moves:
		// room for e2 to overtake, if it could.
		time.Sleep(300 * time.Millisecond)
		if got := acks.order(); len(got) != 0 {
			t.Fatalf("acknowledged %v while e1 was still refused", got)
		}
		refuse.Delete("grow[0]")
		acks.waitFor(t, 2, 5*time.Second)
		if got := acks.order(); !slices.Equal(got, []string{"e1", "e2"}) {
			t.Fatalf("acknowledgement order %v, want [e1 e2]", got)
		}
		if requestsTo(f, fmt.Sprintf("grow[%d]", to)) == 0 {
			t.Fatalf("e2 never went to grow[%d], its partition under 4: %v", to, f.Sent())
		}
		if n := testutil.ToFloat64(m.TopicPartitionChanges.WithLabelValues("grow")); n != 1 {
			t.Fatalf("topic_partition_changes_total{grow} = %v, want 1", n)
		}
		out := logs.String()
		if !strings.Contains(out, `"level":"warn"`) || !strings.Contains(out, `"old_partitions":1`) ||
			!strings.Contains(out, `"new_partitions":4`) || !strings.Contains(out, `"topic":"grow"`) {
			t.Fatalf("no warning with the old and new counts:\n%s", out)
		}
	})
}

// TestPartitionShrinkStops: a topic re-created with fewer partitions moves
// keys with no way to order them after their history; the relay stops
// (position held) and says what to do, instead of routing under the new
// count.
func TestPartitionShrinkStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, _ := partitionBroker()
		c := newFakeCluster(f)
		c.setPartitions("shrink", 4)
		p, m := startPublisher(t, config{Config: Config{PartitionRefresh: 10 * time.Millisecond}}, slog.New(slog.DiscardHandler), c)
		key, _ := keyMoving(3, 4, 2)
		var acks ackLog
		ctx := context.Background()
		if err := p.Publish(ctx, testEvent("shrink", key, "e1"), acks.acker("e1")); err != nil {
			t.Fatal(err)
		}
		acks.waitFor(t, 1, 5*time.Second)

		c.setPartitions("shrink", 2)
		time.Sleep(30 * time.Millisecond) // virtual time: past the refresh interval
		if err := p.Publish(ctx, testEvent("shrink", key, "e2"), acks.acker("e2")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-p.Fatal():
			for _, want := range []string{"shrink", "from 4 to 2 partitions", "position held", "at least 4 partitions"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no fatal error after the topic shrank; acknowledged %v", acks.order())
		}
		if got := acks.order(); !slices.Equal(got, []string{"e1"}) {
			t.Fatalf("acknowledged %v, want only e1 (e2 must wait for the restart)", got)
		}
		if n := testutil.ToFloat64(m.TopicPartitionChanges.WithLabelValues("shrink")); n != 0 {
			t.Fatalf("a shrink counted as a switch: %v", n)
		}
	})
}

// TestPartitionShrinkWhileRetrying: the lane of a partition that no longer
// exists gets UNKNOWN_TOPIC_OR_PARTITION for ever, and no new event comes
// to make the router look. The router's periodic check still finds the
// shrink and stops the relay.
func TestPartitionShrinkWhileRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, refuse := partitionBroker()
		c := newFakeCluster(f)
		c.setPartitions("gone", 4)
		p, _ := startPublisher(t, config{Config: Config{PartitionRefresh: 10 * time.Millisecond, TopicIdleTimeout: 40 * time.Millisecond}}, slog.New(slog.DiscardHandler), c)
		key, _ := keyMoving(3, 4, 2)
		refuse.Store("gone[3]", kafka.UnknownTopicOrPartition)
		var acks ackLog
		if err := p.Publish(context.Background(), testEvent("gone", key, "e1"), acks.acker("e1")); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "e1 retried on gone[3]", 5*time.Second, func() bool { return requestsTo(f, "gone[3]") >= 2 })
		c.setPartitions("gone", 2)
		select {
		case err := <-p.Fatal():
			if !strings.Contains(err.Error(), "from 4 to 2 partitions") {
				t.Fatalf("fatal error %q does not name the shrink", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a lane retried a vanished partition for 5 s without the relay stopping (%d requests)", requestsTo(f, "gone[3]"))
		}
		if n := acks.n.Load(); n != 0 {
			t.Fatalf("e1 acknowledged though its partition is gone")
		}
	})
}

// routerCount returns how many routers the publisher holds.
func routerCount(p *Publisher) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.routers)
}

// bubbleGoroutines counts the goroutines of the caller's synctest bubble.
// runtime.NumGoroutine counts the whole process's, and a goroutine outside
// the bubble (the finalizer goroutine running user code, another test's
// stragglers) lives in real time, long enough for ten seconds of the
// bubble's clock to pass.
func bubbleGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		if n := runtime.Stack(buf, true); n < len(buf) {
			return strings.Count(string(buf[:n]), ", synctest bubble ")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestIdleTopicsEvicted: topics come from event data, so every distinct
// one starts a router and lanes. Once idle they must go away: routers,
// lanes and their goroutines return to the baseline. A topic used again
// afterwards gets a fresh router.
func TestIdleTopicsEvicted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const topics, keys = 200, 8
		c := newFakeCluster(okBroker{})
		for i := range topics {
			c.setPartitions(fmt.Sprintf("t-%d", i), 3)
		}
		p, _ := startPublisher(t, config{Config: Config{TopicIdleTimeout: 50 * time.Millisecond}}, slog.New(slog.DiscardHandler), c)
		synctest.Wait() // the sink's goroutines are up and idle
		baseline := bubbleGoroutines()

		var acks ackLog
		ctx := context.Background()
		for i := range topics {
			for k := range keys {
				id := fmt.Sprintf("t-%d/%d", i, k)
				if err := p.Publish(ctx, testEvent(fmt.Sprintf("t-%d", i), fmt.Sprintf("agg-%d", k), id), acks.acker(id)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n := routerCount(p); n < topics/2 {
			t.Fatalf("%d routers right after publishing to %d topics", n, topics)
		}
		acks.waitFor(t, topics*keys, 10*time.Second)
		peak := bubbleGoroutines()
		if baseline == 0 || peak <= baseline {
			t.Fatalf("goroutines of the bubble: baseline %d, peak %d: not counted", baseline, peak)
		}

		waitUntil(t, "routers and lanes evicted", 10*time.Second, func() bool { return routerCount(p) == 0 && p.lanes.Load() == 0 })
		waitUntil(t, fmt.Sprintf("goroutines back to %d (peak %d)", baseline, peak), 10*time.Second,
			func() bool { return bubbleGoroutines() <= baseline })
		t.Logf("goroutines: baseline %d, peak %d, after eviction %d", baseline, peak, bubbleGoroutines())

		if err := p.Publish(ctx, testEvent("t-0", "agg-0", "again"), acks.acker("again")); err != nil {
			t.Fatal(err)
		}
		acks.waitFor(t, topics*keys+1, 5*time.Second)
	})
}

// TestIdleLaneEvictedWhileTopicBusy: a partition nobody writes to loses
// its lane even while the topic's router is kept busy by another.
func TestIdleLaneEvictedWhileTopicBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newFakeCluster(okBroker{})
		c.setPartitions("busy", 4)
		p, _ := startPublisher(t, config{Config: Config{TopicIdleTimeout: 40 * time.Millisecond}}, slog.New(slog.DiscardHandler), c)
		quiet, hot := keyOn(0, 4), keyOn(1, 4)
		var acks ackLog
		ctx := context.Background()
		if err := p.Publish(ctx, testEvent("busy", quiet, "q"), acks.acker("q")); err != nil {
			t.Fatal(err)
		}
		sawOne := false
		for i := 0; i < 2000 && !sawOne; i++ {
			id := fmt.Sprintf("h%d", i)
			if err := p.Publish(ctx, testEvent("busy", hot, id), acks.acker(id)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond) // virtual time: one event per millisecond
			sawOne = p.lanes.Load() == 1 && i > 10
		}
		if !sawOne {
			t.Fatalf("the idle lane was never evicted while the topic stayed busy (%d lanes)", p.lanes.Load())
		}
		if routerCount(p) != 1 {
			t.Fatal("the busy router was evicted")
		}
	})
}

// TestEvictionRacesPublish publishes to a topic at intervals around its
// idle timeout, so routers and lanes retire while Publish looks them up:
// every event must still be acknowledged, each aggregate's in order (run
// with -race). In virtual time the router's 1ms sweeps and the test's
// wake-ups fall on the same instants, so a retirement runs at the same
// moment as a Publish.
func TestEvictionRacesPublish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newFakeCluster(okBroker{})
		c.setPartitions("race", 2)
		p, _ := startPublisher(t, config{Config: Config{TopicIdleTimeout: 2 * time.Millisecond}}, slog.New(slog.DiscardHandler), c)
		var acks ackLog
		ctx := context.Background()
		const n = 600
		for i := range n {
			id := fmt.Sprintf("%06d", i)
			if err := p.Publish(ctx, testEvent("race", "agg", id), acks.acker(id)); err != nil {
				t.Fatal(err)
			}
			if i%3 != 0 {
				time.Sleep(time.Duration(i%7) * time.Millisecond) // virtual time: 0 to 3 idle timeouts
			}
		}
		acks.waitFor(t, n, 20*time.Second)
		if got := acks.order(); !slices.IsSorted(got) {
			t.Fatalf("acknowledged out of order: %v", got)
		}
	})
}

// TestPublishAfterRouterRetired puts the publisher in the window an idle
// router's exit leaves open: the router has closed its queue and exited
// but is still in the map when Publish looks the topic up. The record must
// not land in that queue (nobody would ever read it); Publish starts a new
// router instead.
func TestPublishAfterRouterRetired(t *testing.T) {
	c := newFakeCluster(okBroker{})
	c.setPartitions("retired", 2)
	p, _ := startPublisher(t, config{}, slog.New(slog.DiscardHandler), c)
	dead := &router{p: p, topic: "retired", q: newQueue(), lanes: map[int]*lane{}}
	if !dead.q.closeIfEmpty() {
		t.Fatal("an empty queue refused to close")
	}
	p.mu.Lock()
	p.routers["retired"] = dead
	p.mu.Unlock()

	var acks ackLog
	if err := p.Publish(context.Background(), testEvent("retired", "agg", "e1"), acks.acker("e1")); err != nil {
		t.Fatal(err)
	}
	acks.waitFor(t, 1, 5*time.Second)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.routers["retired"] == dead {
		t.Fatal("the retired router is still in the map")
	}
}

// TestQueueCloseIfEmpty: a queue with records does not close; a closed
// one refuses pushes.
func TestQueueCloseIfEmpty(t *testing.T) {
	q := newQueue()
	q.push(&outgoing{size: 1})
	if q.closeIfEmpty() {
		t.Fatal("a queue holding a record closed")
	}
	q.take(context.Background(), 10, 100, nil)
	if !q.closeIfEmpty() {
		t.Fatal("an empty queue did not close")
	}
	if q.push(&outgoing{size: 1}) {
		t.Fatal("a closed queue accepted a record")
	}
}

// TestRetryingLaneNotEvicted: a lane whose batch is retried for longer than
// the idle timeout still has outstanding records and must stay, or the
// aggregate's next event would get a second lane on the same partition
// and could overtake the retried one.
func TestRetryingLaneNotEvicted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, refuse := partitionBroker()
		c := newFakeCluster(f)
		c.setPartitions("slow", 1)
		p, _ := startPublisher(t, config{Config: Config{TopicIdleTimeout: 10 * time.Millisecond}}, slog.New(slog.DiscardHandler), c)
		refuse.Store("slow[0]", kafka.NotEnoughReplicas)
		var acks ackLog
		ctx := context.Background()
		if err := p.Publish(ctx, testEvent("slow", "agg", "e1"), acks.acker("e1")); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "e1 retried", 5*time.Second, func() bool { return requestsTo(f, "slow[0]") >= 2 })
		for range 20 { // 10 idle timeouts
			time.Sleep(5 * time.Millisecond) // virtual time: sweeps and retries run in between
			if n := p.lanes.Load(); n != 1 || routerCount(p) != 1 {
				t.Fatalf("%d lanes, %d routers while e1 is being retried; want 1 and 1", n, routerCount(p))
			}
		}
		if err := p.Publish(ctx, testEvent("slow", "agg", "e2"), acks.acker("e2")); err != nil {
			t.Fatal(err)
		}
		refuse.Delete("slow[0]")
		acks.waitFor(t, 2, 5*time.Second)
		if got := acks.order(); !slices.Equal(got, []string{"e1", "e2"}) {
			t.Fatalf("acknowledged %v, want [e1 e2]", got)
		}
	})
}
