package publisher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func TestTopicTemplate(t *testing.T) {
	tt, err := ParseTopicTemplate(DefaultTopicTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if got := tt.Render("order", "order.confirmed"); got != "outbox.event.order" {
		t.Fatalf("rendered %q", got)
	}
	tt, err = ParseTopicTemplate("{aggregate_type}-{event_type}")
	if err != nil || tt.Render("a", "b.c") != "a-b.c" {
		t.Fatalf("%v %q", err, tt.Render("a", "b.c"))
	}
	for _, bad := range []string{"x.{nope}", "x.{aggregate_type", "bad topic {aggregate_type}", "", "__outbox_relay_positions", "__{aggregate_type}"} {
		if _, err := ParseTopicTemplate(bad); err == nil {
			t.Errorf("template %q accepted", bad)
		}
	}
}

// TestMessageSizeBoundsKafkaGo checks that the lane's size estimate is never
// below kafka-go's own, which would let the Writer split a lane batch into
// two produce requests and break the no-overtaking rule.
func TestMessageSizeBoundsKafkaGo(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 70000} {
		m := kafka.Message{Key: make([]byte, n%50), Value: make([]byte, n),
			Headers: []kafka.Header{{Key: "event_id", Value: make([]byte, 36)}, {Key: strings.Repeat("k", n%200), Value: make([]byte, n)}}}
		var w kafka.Writer
		w.BatchBytes = int64(messageSize(&m))
		// WriteMessages rejects a message over BatchBytes before any I/O.
		w.Addr = kafka.TCP("127.0.0.1:1")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := w.WriteMessages(ctx, m)
		cancel()
		var tooLarge kafka.MessageTooLargeError
		if errors.As(err, &tooLarge) {
			t.Fatalf("size %d: estimate %d below kafka-go's accounting", n, messageSize(&m))
		}
	}
}

func TestClassify(t *testing.T) {
	cases := []struct {
		err   error
		class Class
	}{
		{kafka.MessageTooLargeError{}, Permanent},
		{kafka.MessageSizeTooLarge, Permanent},
		{kafka.TopicAuthorizationFailed, Permanent},
		{kafka.SASLAuthenticationFailed, Fatal},
		{kafka.InvalidMessage, Transient},
		{kafka.NotLeaderForPartition, Transient},
		{kafka.LeaderNotAvailable, Transient},
		{kafka.RequestTimedOut, Transient},
		{kafka.UnknownTopicOrPartition, Transient},
		{kafka.WriteErrors{nil, kafka.InvalidTopic}, Permanent},
		{fmt.Errorf("dial: %w", context.DeadlineExceeded), Transient},
		{errors.New("something odd"), Transient},
	}
	for _, c := range cases {
		if got, reason := classify(c.err); got != c.class {
			t.Errorf("%v: %s (%s), want %s", c.err, got, reason, c.class)
		}
	}
}

func TestBackoffBounded(t *testing.T) {
	p := &Publisher{cfg: config{Config: Config{BackoffBase: 100 * time.Millisecond, BackoffMax: 2 * time.Second}}}
	for attempt := 1; attempt < 100; attempt++ {
		if d := p.backoff(attempt); d <= 0 || d > 2*time.Second {
			t.Fatalf("attempt %d: %s", attempt, d)
		}
	}
}

func TestQueueTakeRespectsLimits(t *testing.T) {
	q := newQueue()
	for i := 0; i < 10; i++ {
		q.push(&outgoing{size: 100})
	}
	got := q.take(context.Background(), 4, 1000, nil)
	if len(got) != 4 {
		t.Fatalf("took %d, want 4 (count limit)", len(got))
	}
	got = q.take(context.Background(), 100, 250, nil)
	if len(got) != 2 {
		t.Fatalf("took %d, want 2 (byte limit)", len(got))
	}
	_ = q.take(context.Background(), 100, 1<<20, nil) // drain the other 4
	q.push(&outgoing{size: 5000}, &outgoing{size: 1})
	got = q.take(context.Background(), 100, 10, nil)
	if len(got) != 1 {
		t.Fatalf("an oversized first record must still be taken alone, got %d", len(got))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if newQueue().take(ctx, 1, 1, nil) != nil {
		t.Fatal("take on an empty queue with a done context")
	}
}
