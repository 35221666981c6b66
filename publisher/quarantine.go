package publisher

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/replication"
)

// quarantine decides the fate of events whose aggregate is quarantined, off
// the replication goroutine.
//
// Deciding takes the aggregate's advisory lock in PostgreSQL, and an
// operator's `dlq retry` holds that lock while it re-publishes, with
// retries, for as long as Kafka makes it wait. On the replication
// goroutine that wait would stop every aggregate, keepalive replies and
// status updates with it, until the walsender gives up on the connection.
// So Publish only queues such events here, and one goroutine parks them,
// or, once an operator lifted the quarantine, hands them on to their
// topic's router.
//
// Order per aggregate holds because an aggregate with an event here sends
// every later event here too, until that event has been handed on: see
// route and done.
type quarantine struct {
	p *Publisher
	q *queue
	// loop runs the quarantine's goroutine (run), started by newPublisher
	// with DeadLetters and stopped by Close.
	loop *startstop.Service
	// queued counts events queued or being decided, over all aggregates;
	// zero lets Publish skip the lock in the common case.
	queued atomic.Int64

	mu sync.Mutex
	// pending counts, per aggregate, the events queued or being decided.
	pending map[aggregateKey]int
}

// aggregateKey identifies an aggregate: order is promised per aggregate.
type aggregateKey struct{ typ, id string }

func keyOf(ev *replication.WALEvent) aggregateKey {
	return aggregateKey{ev.AggregateType, ev.AggregateID}
}

func newQuarantine(p *Publisher) *quarantine {
	h := &quarantine{p: p, q: newQueue(), pending: map[aggregateKey]int{}}
	h.loop = startstop.New(h.run)
	return h
}

// route reports whether rec must be queued here (push): its aggregate
// is quarantined, or has an earlier event queued here. It never waits for
// PostgreSQL. Only the replication goroutine routes and pushes, so with
// none queued no aggregate can gain one between this check and the push;
// an aggregate whose queued events are all decided in between is still
// pushed, which costs one Hold.
func (h *quarantine) route(rec *outgoing) bool {
	q := h.p.cfg.DeadLetters
	if h.queued.Load() == 0 && !q.Quarantines(rec.ev) {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pending[keyOf(rec.ev)] > 0 || q.Quarantines(rec.ev)
}

// push queues rec, which route sent here.
func (h *quarantine) push(rec *outgoing) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pending[keyOf(rec.ev)]++
	h.queued.Add(1)
	h.q.push(rec)
}

// done ends rec's stay: after this, a later event of its aggregate may
// take the direct path, so rec must already be parked, dead-lettered or
// queued at its router.
func (h *quarantine) done(rec *outgoing) {
	key := keyOf(rec.ev)
	h.mu.Lock()
	if h.pending[key]--; h.pending[key] <= 0 {
		delete(h.pending, key)
	}
	h.queued.Add(-1)
	h.mu.Unlock()
}

// run decides queued events in arrival order until ctx ends (the
// publisher closes). What it has not decided then is abandoned like every
// unacknowledged event: the slot was not confirmed past it.
func (h *quarantine) run(ctx context.Context) {
	p := h.p
	var batch []*outgoing
	for {
		batch = h.q.take(ctx, 256, 1<<62, batch)
		if batch == nil {
			return
		}
		for _, rec := range batch {
			held, ok := p.park(rec)
			if !ok {
				return
			}
			if !held && !p.forward(rec) {
				return
			}
			if p.txn != nil {
				p.txn.decided(rec)
			}
			h.done(rec)
		}
		clear(batch)
	}
}
