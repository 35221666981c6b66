package relay

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// TestStallWatch: a stall is logged once with the last failure as its
// cause, sets the gauge and the /readyz reason, and all of it clears by
// itself when acknowledgements resume; a slow drain reports nothing.
func TestStallWatch(t *testing.T) {
	var logs bytes.Buffer
	m := metrics.New()
	var failures lastFailure
	w := newStallWatch(5*time.Second, slog.New(zerolog.NewSlogHandler(zerolog.New(&logs))), m, &failures)
	now := time.Unix(1_700_000_000, 0)
	tick := func(inflight, acked int) {
		now = now.Add(time.Second)
		w.observe(now, checkpoint.WindowStats{Events: inflight, Acked: acked})
	}

	// A slow drain: one acknowledgement every 4 s for two minutes.
	for i := 0; i < 120; i++ {
		tick(500, i/4)
	}
	if logs.Len() != 0 || w.reason() != "" || testutil.ToFloat64(m.Stalled) != 0 {
		t.Fatalf("slow drain reported: reason %q, gauge %v, logs %s", w.reason(), testutil.ToFloat64(m.Stalled), logs.String())
	}

	// Kafka stops answering after a last acknowledgement; a timeout is
	// the last failure seen.
	acked := 30
	tick(500, acked)
	failures.record(publisher.Failure{At: now.Add(500 * time.Millisecond), Class: publisher.Transient, Reason: "timeout",
		Topic: "orders", Partition: 3, Attempt: 2, EventID: "e1", AggregateID: "a1", EventType: "created",
		Err: errors.New("context deadline exceeded")})
	for i := 0; i < 4; i++ {
		tick(500, acked)
		if w.reason() != "" {
			t.Fatalf("stall reported after %ds, before the 5s timeout", i+1)
		}
	}
	tick(500, acked)
	want := "stalled: no acknowledgement for 5s with 500 events in flight; last error: timeout (transient) on orders[3], attempt 2, 5s ago: context deadline exceeded"
	if got := w.reason(); got != want {
		t.Fatalf("reason\n got %q\nwant %q", got, want)
	}
	if testutil.ToFloat64(m.Stalled) != 1 {
		t.Fatal("gauge not set")
	}
	for i := 0; i < 10; i++ {
		tick(500, acked)
	}
	if !strings.HasPrefix(w.reason(), "stalled: no acknowledgement for 15s") {
		t.Fatalf("reason not kept current: %q", w.reason())
	}
	if n := strings.Count(logs.String(), "delivery stalled"); n != 1 {
		t.Fatalf("stall logged %d times, want once:\n%s", n, logs.String())
	}
	for _, field := range []string{`"level":"error"`, `"stage":"stall"`, `"inflight":500`, `"reason":"timeout"`, `"event_id":"e1"`,
		`"aggregate_id":"a1"`, `"event_type":"created"`, `"attempt":2`, `"last_error":"context deadline exceeded"`} {
		if !strings.Contains(logs.String(), field) {
			t.Errorf("stall log lacks %s: %s", field, logs.String())
		}
	}

	// Acknowledgements resume: everything clears, logged once.
	tick(400, acked+100)
	tick(300, acked+200)
	if w.reason() != "" || testutil.ToFloat64(m.Stalled) != 0 {
		t.Fatalf("not cleared: reason %q, gauge %v", w.reason(), testutil.ToFloat64(m.Stalled))
	}
	if n := strings.Count(logs.String(), "delivery stall cleared"); n != 1 || !strings.Contains(logs.String(), `"cause":"acknowledgements resumed"`) {
		t.Fatalf("clear logged %d times:\n%s", n, logs.String())
	}
}

// TestStallReasonWithoutFailure: a frozen broker gives no error before the
// write timeout; a failure from before the last acknowledgement is stale.
func TestStallReasonWithoutFailure(t *testing.T) {
	var failures lastFailure
	w := newStallWatch(2*time.Second, slog.New(slog.DiscardHandler), metrics.New(), &failures)
	now := time.Unix(1_700_000_000, 0)
	failures.record(publisher.Failure{At: now.Add(-time.Hour), Reason: "Not Leader For Partition", Err: kafka.NotLeaderForPartition})
	for i := 0; i <= 3; i++ {
		w.observe(now.Add(time.Duration(i)*time.Second), checkpoint.WindowStats{Events: 7, Acked: 1})
	}
	if got := w.reason(); !strings.Contains(got, "7 events in flight; last error: none since the last acknowledgement") {
		t.Fatalf("reason %q", got)
	}
	// The stream ends (leadership lost, reconnect): nothing in flight.
	w.observe(now.Add(4*time.Second), checkpoint.WindowStats{})
	if w.reason() != "" {
		t.Fatalf("stall kept without a stream: %q", w.reason())
	}
	failures.record(publisher.Failure{At: now.Add(5 * time.Second), Class: publisher.Transient, Reason: "unknown_topic_or_partition",
		Topic: "t", Partition: -1, Attempt: 9, Err: kafka.UnknownTopicOrPartition})
	for i := 5; i <= 9; i++ {
		w.observe(now.Add(time.Duration(i)*time.Second), checkpoint.WindowStats{Events: 1, Acked: 0})
	}
	if got := w.reason(); !strings.Contains(got, "on topic t metadata, attempt 9") {
		t.Fatalf("reason %q", got)
	}
}

// TestStallWithOnlyHeldAcks: a stream stopped by a checkpoint save that
// never ends has nothing unacknowledged in flight, only acknowledgements
// held for the save; that is a stall too, and its reason says so.
func TestStallWithOnlyHeldAcks(t *testing.T) {
	var logs bytes.Buffer
	m := metrics.New()
	w := newStallWatch(3*time.Second, slog.New(zerolog.NewSlogHandler(zerolog.New(&logs))), m, &lastFailure{})
	now := time.Unix(1_700_000_000, 0)
	for i := 0; i <= 3; i++ {
		w.observe(now.Add(time.Duration(i)*time.Second), checkpoint.WindowStats{Held: 10000, Acked: 52000})
	}
	if testutil.ToFloat64(m.Stalled) != 1 {
		t.Fatalf("held acknowledgements with no progress for the timeout: no stall reported (logs %s)", logs.String())
	}
	if got := w.reason(); !strings.Contains(got, "10000 events in flight") || !strings.Contains(got, "10000 of the events in flight are acknowledged and wait for a checkpoint save") {
		t.Fatalf("reason %q", got)
	}
	if !strings.Contains(logs.String(), `"held_for_checkpoint":10000`) {
		t.Fatalf("stall log lacks the held count: %s", logs.String())
	}
}
