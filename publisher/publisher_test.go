package publisher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/replication"
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
	for _, bad := range []string{"x.{nope}", "x.{aggregate_type", "bad topic {aggregate_type}", ""} {
		if _, err := ParseTopicTemplate(bad); err == nil {
			t.Errorf("template %q accepted", bad)
		}
	}
	if ValidTopic("ok.topic_1-x") != nil || ValidTopic("a b") == nil || ValidTopic(strings.Repeat("a", 250)) == nil {
		t.Fatal("topic name rules")
	}
}

func TestBuildMessage(t *testing.T) {
	ev := &replication.Event{
		EventID: "e1", AggregateType: "order", AggregateID: "o-1", AggregateVersion: "7",
		EventType: "order.confirmed", SchemaVersion: "2", Payload: []byte(`{"a":1}`),
		Headers: []byte(`{"trace_id": "t-1", "tenant": "acme"}`), CommitTime: time.Unix(100, 0),
	}
	m, err := buildMessage("outbox.event.order", ev)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Key) != "o-1" || string(m.Value) != `{"a":1}` || !m.Time.Equal(ev.CommitTime) {
		t.Fatalf("message %+v", m)
	}
	want := []string{"event_id=e1", "event_type=order.confirmed", "schema_version=2", "aggregate_type=order",
		"aggregate_version=7", "trace_id=t-1", "tenant=acme"}
	var got []string
	for _, h := range m.Headers {
		got = append(got, h.Key+"="+string(h.Value))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("headers %v, want %v", got, want)
	}
	if messageSize(&m) < len(m.Key)+len(m.Value) {
		t.Fatal("messageSize below content")
	}
}

func TestHeadersMustBeStringObject(t *testing.T) {
	for _, raw := range []string{`[1]`, `{"a": 1}`, `{"a": {"b": "c"}}`, `"x"`, `{"": "v"}`, `{"a": "b"`} {
		if _, err := parseHeaders([]byte(raw)); err == nil {
			t.Errorf("headers %s accepted", raw)
		}
	}
	if h, err := parseHeaders([]byte(`null`)); err != nil || h != nil {
		t.Fatal("null headers")
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
	p := &Publisher{cfg: Config{BackoffBase: 100 * time.Millisecond, BackoffMax: 2 * time.Second}}
	for attempt := 1; attempt < 100; attempt++ {
		if d := p.backoff(attempt); d <= 0 || d > 2*time.Second {
			t.Fatalf("attempt %d: %s", attempt, d)
		}
	}
}

func TestQueueTakeRespectsLimits(t *testing.T) {
	q := newQueue()
	for i := 0; i < 10; i++ {
		q.push(&record{size: 100})
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
	q.push(&record{size: 5000}, &record{size: 1})
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

func BenchmarkBuildMessage(b *testing.B) {
	ev := &replication.Event{
		EventID: "0190a1b2-0000-7000-8000-000000000001", AggregateType: "order", AggregateID: "ord-000001",
		AggregateVersion: "3", EventType: "order.confirmed", SchemaVersion: "1",
		Payload: make([]byte, 300), Headers: []byte(`{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}`),
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := buildMessage("outbox.event.order", ev); err != nil {
			b.Fatal(err)
		}
	}
}
