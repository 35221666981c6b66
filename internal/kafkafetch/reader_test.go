package kafkafetch

import (
	"context"
	"errors"
	"net"
	"testing"
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
// left; FetchMessage then says ErrClosed.
func TestCloseWhileRetrying(t *testing.T) {
	before := goleak.IgnoreCurrent()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	r, err := New(Config{Brokers: []string{addr}, Topic: "t", Offset: kafka.FirstOffset,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := r.FetchMessage(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("FetchMessage: %v, want the context's deadline (the reader retries)", err)
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
}
