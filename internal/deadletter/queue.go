package deadletter

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Queue is the relay's side of the dead-letter queue: it writes poison
// events as dead letters, keeps their aggregates quarantined (in memory,
// backed by the dead-letter table) and parks the later events of those
// aggregates. It implements publisher.DeadLetters. Safe for concurrent use
// by the stream and the lanes.
type Queue struct {
	store  *Store
	policy poison.Policy
	log    *slog.Logger

	mu   sync.Mutex
	open map[Aggregate]replication.Position // earliest open row per aggregate
	// resolved holds, by event id, the events ahead of the stream's start
	// that an operator resolved (published by a dlq retry, or
	// discarded) before the stream reached them again: see Hold.
	resolved map[string]string

	// OnPark and OnDead, if set, are called after a row is written.
	OnPark, OnDead func()
}

// NewQueue loads the quarantined aggregates of store.
func NewQueue(ctx context.Context, store *Store, policy poison.Policy, log *slog.Logger) (*Queue, error) {
	q := &Queue{store: store, policy: policy, log: log}
	if err := q.Reload(ctx, 0); err != nil {
		return nil, err
	}
	return q, nil
}

// Reload replaces what the quarantine knows with what the dead-letter
// table says. The relay calls it whenever it starts streaming: while it
// was a standby, or between two streams, the leader of the time may have
// quarantined aggregates (and operators lifted others), and an aggregate
// missing here would have its next event published ahead of the dead and
// parked ones.
//
// since is where the stream starts (its transactions' commit LSNs are at
// or after it; 0 when no stream starts). The events at or after it that
// the relay dead-lettered or parked before (in a range it wrote but never
// confirmed: an aborted Kafka transaction, a crash) and that an operator
// resolved meanwhile will be redelivered; Reload keeps them, so that Hold
// does not publish them a second time, or at all when discarded.
func (q *Queue) Reload(ctx context.Context, since pglogrepl.LSN) error {
	open, err := q.store.open(ctx)
	if err != nil {
		return err
	}
	var resolved map[string]string
	if since > 0 {
		if resolved, err = q.store.resolvedSince(ctx, since); err != nil {
			return err
		}
		if len(resolved) > maxResolvedAhead {
			q.log.Warn("more events resolved ahead of the stream than kept in memory; the others are published again if redelivered",
				slog.String("stage", "quarantine"), slog.Int("kept", maxResolvedAhead))
		}
	}
	q.mu.Lock()
	q.open, q.resolved = open, resolved
	q.mu.Unlock()
	if len(resolved) > 0 {
		q.log.Info("events ahead of the stream were resolved by an operator since the relay dead-lettered or parked them; they are not published again",
			slog.String("stage", "quarantine"), slog.Int("events", len(resolved)), slog.String("since", since.String()))
	}
	if len(open) > 0 {
		q.log.Warn("aggregates are quarantined; their new events are parked until an operator runs outbox-relay dlq retry or discard", slog.String("stage", "quarantine"), slog.Int("aggregates", len(open)))
	}
	return nil
}

// Quarantined returns the number of quarantined aggregates.
func (q *Queue) Quarantined() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.open)
}

// Quarantines reports, from memory, whether ev's aggregate is
// quarantined. Every event of such an aggregate may need its lock (to be
// parked, or dead-lettered when it is poison too), which an operator's dlq
// retry can hold for long, so the caller decides it off the replication
// goroutine.
func (q *Queue) Quarantines(ev *replication.WALEvent) bool {
	q.mu.Lock()
	_, ok := q.open[Aggregate{ev.AggregateType, ev.AggregateID}]
	if !ok && len(q.resolved) > 0 {
		_, ok = q.resolved[ev.EventID]
	}
	q.mu.Unlock()
	return ok
}

// Hold parks ev if its aggregate is quarantined at an earlier position and
// reports whether ev is taken care of (parked now, or the poison event
// itself redelivered). The row is committed before Hold returns, so the
// caller may acknowledge ev.
//
// An event the relay dead-lettered or parked before, in a range it never
// confirmed, comes again when the stream restarts behind it. If an
// operator resolved it meanwhile (a dlq retry published it, or a discard
// dropped it), it is taken care of: published again it would be a
// duplicate after its successors, and a discarded one would reach
// consumers against the operator's decision. Hold reports it handled and
// logs it; its row says what happened to it.
func (q *Queue) Hold(ctx context.Context, ev *replication.WALEvent, topic string) (bool, error) {
	agg := Aggregate{ev.AggregateType, ev.AggregateID}
	q.mu.Lock()
	pos, ok := q.open[agg]
	status, resolved := q.resolved[ev.EventID]
	delete(q.resolved, ev.EventID)
	q.mu.Unlock()
	if resolved {
		q.logResolved(ev, status)
		return true, nil
	}
	if !ok || ev.Pos().Before(pos) {
		return false, nil
	}
	if ev.Pos() == pos {
		return true, nil // the poison event again, after a redelivery
	}
	parked := false
	err := q.inAggregateLock(ctx, agg, func(tx pgx.Tx) error {
		// The aggregate's open rows, and this event's own row: a dlq
		// retry that ran since the quarantine was loaded may have
		// published it (a redelivery of an event parked before).
		var stillOpen bool
		var own *string
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+q.store.table+` WHERE outbox_table = $1
			AND aggregate_type = $2 AND aggregate_id = $3 AND status IN ('dead', 'parked')),
			(SELECT status FROM `+q.store.table+` WHERE outbox_table = $1 AND event_id = $4)`,
			q.store.outbox, agg.Type, agg.ID, ev.EventID).Scan(&stillOpen, &own)
		if err != nil {
			return err
		}
		if own != nil && (*own == StatusPublished || *own == StatusDiscarded) {
			status, resolved = *own, true
			return nil
		}
		if !stillOpen {
			return nil
		}
		parked = true
		return q.store.insert(ctx, tx, ev, topic, StatusParked, "permanent", "aggregate quarantined behind an earlier poison event")
	})
	if err != nil {
		return false, err
	}
	if resolved {
		// The aggregate's next event finds out whether the quarantine
		// was lifted, as below.
		q.logResolved(ev, status)
		return true, nil
	}
	if !parked {
		// An operator lifted the quarantine: publish again from here on.
		q.mu.Lock()
		if q.open[agg] == pos {
			delete(q.open, agg)
		}
		q.mu.Unlock()
		q.log.Info("quarantine lifted; publishing again", slog.String("stage", "quarantine"), slog.String("aggregate_type", agg.Type), slog.String("aggregate_id", agg.ID))
		return false, nil
	}
	if q.OnPark != nil {
		q.OnPark()
	}
	q.log.Warn("event parked behind its aggregate's poison event", slog.String("stage", "quarantine"), slog.String("event_id", ev.EventID), slog.String("aggregate_id", ev.AggregateID), slog.String("event_type", ev.EventType))
	return true, nil
}

// logResolved reports a redelivered event that an operator resolved.
func (q *Queue) logResolved(ev *replication.WALEvent, status string) {
	q.log.Info("redelivered event already resolved by an operator ("+status+"); not published again (outbox-relay dlq show)",
		slog.String("stage", "quarantine"), slog.String("event_id", ev.EventID), slog.String("aggregate_id", ev.AggregateID),
		slog.String("event_type", ev.EventType), slog.String("status", status))
}

// Poison writes ev as dead with its reason and quarantines its aggregate.
// Under poison.Halt it writes nothing and returns a *poison.HaltError.
func (q *Queue) Poison(ctx context.Context, ev *replication.WALEvent, topic, class, reason string) error {
	if q.policy == poison.Halt {
		return &poison.HaltError{EventID: ev.EventID, AggregateID: ev.AggregateID, Reason: reason, Held: "the slot position"}
	}
	agg := Aggregate{ev.AggregateType, ev.AggregateID}
	err := q.inAggregateLock(ctx, agg, func(tx pgx.Tx) error {
		return q.store.insert(ctx, tx, ev, topic, StatusDead, class, reason)
	})
	if err != nil {
		return err
	}
	q.mu.Lock()
	if pos, ok := q.open[agg]; !ok || ev.Pos().Before(pos) {
		q.open[agg] = ev.Pos()
	}
	q.mu.Unlock()
	if q.OnDead != nil {
		q.OnDead()
	}
	q.log.Error("poison event dead-lettered; its aggregate is quarantined (outbox-relay dlq list)", slog.String("stage", "quarantine"), slog.String("event_id", ev.EventID), slog.String("aggregate_type", ev.AggregateType), slog.String("aggregate_id", ev.AggregateID), slog.String("event_type", ev.EventType), slog.String("class", class), slog.String("reason", reason))
	return nil
}

// inAggregateLock runs f in a transaction holding agg's advisory lock.
func (q *Queue) inAggregateLock(ctx context.Context, agg Aggregate, f func(pgx.Tx) error) error {
	tx, err := q.store.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+lockKey+`)`, q.store.outbox, agg.Type, agg.ID); err != nil {
		return fmt.Errorf("dead-letter: lock aggregate %s: %w", agg, err)
	}
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("dead-letter: commit: %w", err)
	}
	return nil
}
