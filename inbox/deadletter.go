package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/record"
)

// DeadLetter is one row of the consumer's dead-letter table.
type DeadLetter struct {
	record.Event
	Seq           int64
	Status        string // dead, parked, applied, discarded
	Reason        string
	Attempts      int
	FirstFailedAt time.Time
	LastFailedAt  time.Time
	ResolvedAt    *time.Time
	Resolution    string
}

// DeadLetters lists this consumer's dead-letter rows in arrival order:
// the open ones (dead, parked), or all with all = true. At most limit rows
// (limit <= 0 means 1000).
func (c *Consumer) DeadLetters(ctx context.Context, all bool, limit int) ([]DeadLetter, error) {
	if limit <= 0 {
		limit = 1000
	}
	q := `SELECT ` + dlColumns + ` FROM ` + c.store.dl + ` WHERE consumer = $1`
	if !all {
		q += ` AND status IN ('dead', 'parked')`
	}
	rows, err := c.cfg.Pool.Query(ctx, q+` ORDER BY seq LIMIT $2`, c.cfg.Name, limit)
	if err != nil {
		return nil, fmt.Errorf("inbox: list dead letters: %w", err)
	}
	return pgx.CollectRows(rows, scanDeadLetter)
}

const dlColumns = `event_id::text, seq, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version,
	coalesce(headers, '{}'::jsonb), payload, topic, kafka_partition, kafka_offset, coalesce(record_time, 'epoch'::timestamptz),
	status, reason, attempts, first_failed_at, last_failed_at, resolved_at, coalesce(resolution, '')`

func scanDeadLetter(row pgx.CollectableRow) (DeadLetter, error) {
	var d DeadLetter
	err := row.Scan(&d.ID, &d.Seq, &d.AggregateType, &d.AggregateID, &d.AggregateVersion, &d.EventType, &d.SchemaVersion,
		&d.Headers, &d.Payload, &d.Topic, &d.Partition, &d.Offset, &d.Time,
		&d.Status, &d.Reason, &d.Attempts, &d.FirstFailedAt, &d.LastFailedAt, &d.ResolvedAt, &d.Resolution)
	if len(d.Headers) == 0 {
		d.Headers = nil
	}
	d.SchemaID, _ = record.FramedSchemaID(d.Payload)
	return d, err
}

// ErrStillFailing is wrapped by Retry's error when an event fails again.
var ErrStillFailing = errors.New("event still fails")

// Retry applies the open (dead, then parked) events of one aggregate with
// the consumer's handler, in arrival order, each in its own transaction
// that also registers it in processed_events, and marks each applied. It
// stops at the first event that fails again: that one stays (or becomes)
// dead with attempts + 1, and the error wraps ErrStillFailing. When no open
// event is left the aggregate flows again. Safe while Run runs anywhere:
// both hold the aggregate's advisory lock.
func (c *Consumer) Retry(ctx context.Context, aggregateType, aggregateID string) (appliedN int, err error) {
	for {
		done, err := c.retryOne(ctx, aggregateType, aggregateID)
		if err != nil || done {
			return appliedN, err
		}
		appliedN++
	}
}

func (c *Consumer) retryOne(ctx context.Context, aggType, aggID string) (done bool, err error) {
	s := c.store
	tx, err := c.cfg.Pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("inbox: retry: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, lockSQL, s.consumer, aggType, aggID); err != nil {
		return false, fmt.Errorf("inbox: retry: lock: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT `+dlColumns+` FROM `+s.dl+` WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3
		AND status IN ('dead', 'parked') ORDER BY seq LIMIT 1`, s.consumer, aggType, aggID)
	if err != nil {
		return false, fmt.Errorf("inbox: retry: %w", err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanDeadLetter)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, tx.Commit(ctx)
	}
	if err != nil {
		return false, fmt.Errorf("inbox: retry: %w", err)
	}
	ev := d.Event
	inserted, err := s.registerBatch(ctx, tx, []*record.Event{&ev}, nil)
	if err != nil {
		return false, fmt.Errorf("inbox: retry: register %s: %w", ev.ID, err)
	}
	_, fresh := inserted[ev.ID]
	resolution := "applied by retry"
	var herr error
	if !fresh {
		resolution = "already processed"
	} else {
		// A framed payload (SchemaID set) is one the consumer did not
		// decode: its schema was not found, or it was read raw. Decode it
		// as Run would now.
		herr = c.schemaValue(ctx, &ev)
		var re *registryError
		if errors.As(herr, &re) {
			return false, fmt.Errorf("inbox: retry: event %s: %w", ev.ID, herr)
		}
		if herr == nil {
			herr = c.applyIsolated(ctx, tx, &ev)
		}
	}
	if herr != nil {
		tx.Rollback(ctx) //nolint:errcheck
		if _, err := c.cfg.Pool.Exec(ctx, `UPDATE `+s.dl+` SET status = 'dead', attempts = attempts + 1, reason = $3, last_failed_at = now()
			WHERE consumer = $1 AND event_id = $2`, s.consumer, ev.ID, herr.Error()); err != nil {
			return false, fmt.Errorf("inbox: retry: event %s failed (%v) and recording it failed: %w", ev.ID, herr, err)
		}
		return false, fmt.Errorf("inbox: retry: event %s (aggregate %s, version %d): %w: %w", ev.ID, ev.AggregateID, ev.AggregateVersion, ErrStillFailing, herr)
	}
	if _, err := tx.Exec(ctx, `UPDATE `+s.dl+` SET status = 'applied', resolved_at = now(), resolution = $3
		WHERE consumer = $1 AND event_id = $2`, s.consumer, ev.ID, resolution); err != nil {
		return false, fmt.Errorf("inbox: retry: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("inbox: retry: commit %s: %w", ev.ID, err)
	}
	c.applied.Add(1)
	c.m.applied()
	return false, nil
}

// applyIsolated runs the handler in a savepoint, so that a failure leaves
// the outer transaction usable.
func (c *Consumer) applyIsolated(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	if c.cfg.Handler != nil {
		err = c.cfg.Handler(ctx, sp, ev)
	} else {
		err = c.cfg.BatchHandler(ctx, sp, []*record.Event{ev})
	}
	if err != nil {
		sp.Rollback(ctx) //nolint:errcheck
		return err
	}
	return sp.Commit(ctx)
}

// Discard marks an open dead-letter event discarded with a reason (it is
// never applied; a redelivery of it is absorbed), then Retries the rest of
// its aggregate.
func (c *Consumer) Discard(ctx context.Context, eventID, reason string) (appliedN int, err error) {
	if reason == "" {
		return 0, errors.New("inbox: discard needs a reason (it is recorded)")
	}
	var aggType, aggID string
	err = c.cfg.Pool.QueryRow(ctx, `SELECT aggregate_type, aggregate_id FROM `+c.store.dl+`
		WHERE consumer = $1 AND event_id = $2 AND status IN ('dead', 'parked')`, c.cfg.Name, eventID).Scan(&aggType, &aggID)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("inbox: discard: no open dead-letter event %s for consumer %s", eventID, c.cfg.Name)
	}
	if err != nil {
		return 0, fmt.Errorf("inbox: discard: %w", err)
	}
	tx, err := c.cfg.Pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("inbox: discard: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, lockSQL, c.cfg.Name, aggType, aggID); err != nil {
		return 0, fmt.Errorf("inbox: discard: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE `+c.store.dl+` SET status = 'discarded', resolved_at = now(), resolution = $3
		WHERE consumer = $1 AND event_id = $2 AND status IN ('dead', 'parked')`, c.cfg.Name, eventID, "discarded: "+reason); err != nil {
		return 0, fmt.Errorf("inbox: discard: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("inbox: discard: %w", err)
	}
	return c.Retry(ctx, aggType, aggID)
}
