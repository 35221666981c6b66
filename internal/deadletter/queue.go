package deadletter

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

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

	// OnPark and OnDead, if set, are called after a row is written.
	OnPark, OnDead func()
}

// NewQueue loads the quarantined aggregates of store.
func NewQueue(ctx context.Context, store *Store, policy poison.Policy, log *slog.Logger) (*Queue, error) {
	q := &Queue{store: store, policy: policy, log: log}
	if err := q.Reload(ctx); err != nil {
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
func (q *Queue) Reload(ctx context.Context) error {
	open, err := q.store.open(ctx)
	if err != nil {
		return err
	}
	q.mu.Lock()
	q.open = open
	q.mu.Unlock()
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
func (q *Queue) Quarantines(ev *replication.Event) bool {
	q.mu.Lock()
	_, ok := q.open[Aggregate{ev.AggregateType, ev.AggregateID}]
	q.mu.Unlock()
	return ok
}

// Hold parks ev if its aggregate is quarantined at an earlier position and
// reports whether ev is taken care of (parked now, or the poison event
// itself redelivered). The row is committed before Hold returns, so the
// caller may acknowledge ev.
func (q *Queue) Hold(ctx context.Context, ev *replication.Event, topic string) (bool, error) {
	agg := Aggregate{ev.AggregateType, ev.AggregateID}
	q.mu.Lock()
	pos, ok := q.open[agg]
	q.mu.Unlock()
	if !ok || ev.Pos().Before(pos) {
		return false, nil
	}
	if ev.Pos() == pos {
		return true, nil // the poison event again, after a redelivery
	}
	parked := false
	err := q.inAggregateLock(ctx, agg, func(tx pgx.Tx) error {
		var stillOpen bool
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+q.store.table+` WHERE outbox_table = $1
			AND aggregate_type = $2 AND aggregate_id = $3 AND status IN ('dead', 'parked'))`,
			q.store.outbox, agg.Type, agg.ID).Scan(&stillOpen)
		if err != nil || !stillOpen {
			return err
		}
		parked = true
		return q.store.insert(ctx, tx, ev, topic, StatusParked, "permanent", "aggregate quarantined behind an earlier poison event")
	})
	if err != nil {
		return false, err
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

// Poison writes ev as dead with its reason and quarantines its aggregate.
// Under poison.Halt it writes nothing and returns a *poison.HaltError.
func (q *Queue) Poison(ctx context.Context, ev *replication.Event, topic, class, reason string) error {
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
