package kafkafetch

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"
)

func TestNewChecksConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Topic: "t"},
		{Brokers: []string{"127.0.0.1:9092"}},
		{Brokers: []string{"127.0.0.1:9092"}, Topic: "t", Partition: -1},
		{Brokers: []string{"127.0.0.1:9092"}, Topic: "t", Offset: -3},
	} {
		if r, err := New(cfg); err == nil {
			r.Close()
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestCloseWhileRetrying: a reader whose broker refuses connections
// retries (FetchMessage waits), and Close ends it with no goroutine
// left; FetchMessage then says ErrClosed. It runs in virtual time
// (synctest), so the dial refuses in memory the way a closed port does:
// a real socket would not block durably inside the bubble.
func TestCloseWhileRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		before := goleak.IgnoreCurrent()
		var dials atomic.Int32
		refuse := func(_ context.Context, network, address string) (net.Conn, error) {
			dials.Add(1)
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		}
		r, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t", Offset: kafka.FirstOffset,
			Dialer:     &kafka.Dialer{DialFunc: refuse, Timeout: time.Second},
			BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := r.FetchMessage(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("FetchMessage: %v, want the context's deadline (the reader retries)", err)
		}
		if n := dials.Load(); n < 2 {
			t.Fatalf("%d dials in 200ms, want retries", n)
		}
		began := time.Now()
		r.Close()
		if d := time.Since(began); d > 2*time.Second {
			t.Errorf("Close took %v", d)
		}
		if _, err := r.FetchMessage(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("FetchMessage after Close: %v, want ErrClosed", err)
		}
		goleak.VerifyNone(t, before)
	})
}

// TestFetchSizer: responses of many small batches shrink the next fetch
// so that a response holds about pageBudget batches (kafka-go's 64 KiB
// page each); large batches let it grow, at most twofold at a time, up to
// the configured maximum.
func TestFetchSizer(t *testing.T) {
	s := newFetchSizer(1 << 20)
	if s.next != minFetchBytes {
		t.Fatalf("first fetch %d bytes, want %d", s.next, minFetchBytes)
	}
	s.observe(2) // two batches in 16 KiB: large ones
	if s.next != 2*minFetchBytes {
		t.Fatalf("after large batches: %d, want twofold growth %d", s.next, 2*minFetchBytes)
	}
	for range 10 {
		s.observe(2)
	}
	if s.next != 1<<20 {
		t.Fatalf("after many large batches: %d, want the maximum", s.next)
	}
	s.observe(10000) // 1 MiB of 100-byte batches
	if s.next != minFetchBytes {
		t.Fatalf("after tiny batches: %d, want the minimum %d", s.next, minFetchBytes)
	}
	s.observe(0) // an empty response: grow
	if s.next != 2*minFetchBytes {
		t.Fatalf("after an empty response: %d, want %d", s.next, 2*minFetchBytes)
	}
	small := newFetchSizer(4 << 10)
	small.observe(1000)
	if small.next != 4<<10 {
		t.Fatalf("a maximum below the minimum: %d, want it", small.next)
	}
}
