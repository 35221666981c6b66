package kafkafetch

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"
)

// TestCloseWaitsForTheFetcher: when Close returns, the fetching goroutine
// (run) has returned too, even if it was waiting for a broker that never
// answers a dial: nothing of the reader reads or hands on responses
// after Close. The check is the goroutine's stack right after Close, no
// waiting; goleak then finds nothing left of the reader at all.
func TestCloseWaitsForTheFetcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		before := goleak.IgnoreCurrent()
		var dials atomic.Int32
		silent := func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			<-ctx.Done()
			return nil, errors.New("dial cancelled")
		}
		r, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t", Offset: kafka.FirstOffset,
			Dialer:     &kafka.Dialer{DialFunc: silent, Timeout: time.Hour},
			BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond, RequestTimeout: time.Hour, MaxWait: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the fetcher waits for the dial
		if dials.Load() == 0 || !fetcherRunning() {
			t.Fatal("the fetcher is not waiting for a dial")
		}
		r.Close()
		if fetcherRunning() {
			t.Fatal("Close returned while the fetching goroutine still ran")
		}
		goleak.VerifyNone(t, before)
	})
}

// fetcherRunning reports whether a goroutine is in PartitionReader.run.
func fetcherRunning() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "kafkafetch.(*PartitionReader).run(")
}
