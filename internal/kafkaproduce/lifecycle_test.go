package kafkaproduce

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
)

// lingeringBroker holds every produce request until its context ends and
// then takes a while to return, as a request finishing on a slow
// connection does; inside counts the requests running.
type lingeringBroker struct{ inside atomic.Int32 }

func (b *lingeringBroker) RoundTrip(ctx context.Context, _ net.Addr, _ protocol.Message) (protocol.Message, error) {
	b.inside.Add(1)
	defer b.inside.Add(-1)
	<-ctx.Done()
	time.Sleep(time.Second) // virtual time (synctest)
	return nil, ctx.Err()
}

// TestSinkStopWaitsForItsGoroutines: Stop returns only once the collector
// and every sender have returned, a request still on its way included,
// and the batch it carried is answered: no goroutine of the sink outlives
// Stop. The request lingers on the fake clock, so a Stop that did not
// wait returns before it ends.
func TestSinkStopWaitsForItsGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		broker := &lingeringBroker{}
		c := NewSink(ctx, broker, kafka.TCP("127.0.0.1:1"), time.Hour, 0, func() int { return 1 })
		c.Start()
		var produced sync.WaitGroup
		var err error
		produced.Go(func() { err = c.Produce(testBatch("a", 0, 1)) })
		synctest.Wait() // the request is with the broker
		if n := broker.inside.Load(); n != 1 {
			t.Fatalf("%d requests under way, want 1", n)
		}
		cancel()
		c.Stop()
		if n := broker.inside.Load(); n != 0 {
			t.Fatalf("Stop returned with %d request(s) under way", n)
		}
		if n := sinkGoroutines(); n != 0 {
			t.Fatalf("Stop returned with %d goroutine(s) of the sink running", n)
		}
		produced.Wait()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Produce: %v, want the sink's context's error", err)
		}
	})
}

// sinkGoroutines counts the sink's own goroutines: the collector and the
// senders (a Produce is its caller's).
func sinkGoroutines() int {
	buf := make([]byte, 1<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "kafkaproduce.(*Sink).collect(") || strings.Contains(g, "kafkaproduce.(*Sink).sendGroups(") {
			n++
		}
	}
	return n
}
