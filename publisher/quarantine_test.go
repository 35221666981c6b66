package publisher

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

// lockedQuarantine quarantines aggregate "x" and makes Hold wait until
// release is closed, like an operator's dlq retry holding the aggregate's
// lock; then the quarantine is lifted (Hold reports false).
type lockedQuarantine struct {
	release chan struct{}
	mu      sync.Mutex
	lifted  bool
}

func (q *lockedQuarantine) Quarantines(ev *replication.WALEvent) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return ev.AggregateID == "x" && !q.lifted
}

func (q *lockedQuarantine) Hold(ctx context.Context, ev *replication.WALEvent, _ string) (bool, error) {
	if ev.AggregateID != "x" {
		return false, nil
	}
	select {
	case <-q.release:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	q.mu.Lock()
	q.lifted = true
	q.mu.Unlock()
	return false, nil
}

func (q *lockedQuarantine) Poison(context.Context, *replication.WALEvent, string, string, string) error {
	return nil
}

type nopAck struct{}

func (nopAck) Ack(int) {}

// TestPublishNeverWaitsForQuarantineLock checks that an event of a
// quarantined aggregate whose lock an operator holds does not block
// Publish (the replication goroutine), that other aggregates go on, and
// that once the lock is released the held aggregate's events reach their
// router in order, including one published after the quarantine was
// lifted in memory.
func TestPublishNeverWaitsForQuarantineLock(t *testing.T) {
	q := &lockedQuarantine{release: make(chan struct{})}
	p := New([]string{"127.0.0.1:1"}, Config{TopicTemplate: "t", NoIdempotence: true}, WithDeadLetters(q), WithMetrics(metrics.New().Publisher()))
	defer p.Close()
	// A router without its goroutine: what is queued stays for inspection.
	r := &router{p: p, topic: "t", q: newQueue(), lanes: map[int]*lane{}}
	p.routers["t"] = r
	ev := func(id, agg string) *replication.WALEvent {
		return &replication.WALEvent{
			Row: record.Row{EventID: id, AggregateType: "a", AggregateID: agg, EventType: "e", AggregateVersion: "1", SchemaVersion: "1", Payload: []byte(`{}`)},
		}
	}
	publish := func(e *replication.WALEvent) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- p.Publish(context.Background(), e, nopAck{}) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("Publish(%s) blocked behind the quarantine lock", e.EventID)
		}
	}
	queued := func() (ids []string) {
		r.q.mu.Lock()
		defer r.q.mu.Unlock()
		for _, rec := range r.q.items {
			ids = append(ids, rec.ev.EventID)
		}
		return ids
	}

	publish(ev("x1", "x"))
	publish(ev("y1", "y"))
	if got := queued(); len(got) != 1 || got[0] != "y1" {
		t.Fatalf("router queue %v, want [y1]: another aggregate must not wait", got)
	}
	// Lifted in memory while x1 still waits: x2 must queue behind x1.
	q.mu.Lock()
	q.lifted = true
	q.mu.Unlock()
	publish(ev("x2", "x"))
	publish(ev("y2", "y"))
	if got := queued(); len(got) != 2 || got[1] != "y2" {
		t.Fatalf("router queue %v, want [y1 y2]", got)
	}
	close(q.release)
	deadline := time.Now().Add(5 * time.Second)
	for len(queued()) < 4 && time.Now().Before(deadline) {
		// wall-clock: a poll interval. The test stays out of a synctest
		// bubble: a Publish stuck on a mutex (not durably blocked) would
		// stop virtual time and hang instead of failing after 2s.
		time.Sleep(5 * time.Millisecond)
	}
	got := queued()
	if len(got) != 4 || got[2] != "x1" || got[3] != "x2" {
		t.Fatalf("router queue %v, want [y1 y2 x1 x2]", got)
	}
	// Nothing pending: the next event of x takes the direct path.
	publish(ev("x3", "x"))
	if got := queued(); len(got) != 5 || got[4] != "x3" {
		t.Fatalf("router queue %v, want x3 last", got)
	}
	p.quarantine.mu.Lock()
	defer p.quarantine.mu.Unlock()
	if p.quarantine.queued.Load() != 0 || len(p.quarantine.pending) != 0 {
		t.Fatalf("quarantine still counts %d events (%v)", p.quarantine.queued.Load(), p.quarantine.pending)
	}
}
