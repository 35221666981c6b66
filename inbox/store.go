package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// store runs the inbox's SQL for one consumer.
type store struct {
	pool      *pgxpool.Pool
	consumer  string
	processed string // quoted schema.processed_events
	dl        string // quoted schema.inbox_dead_letter
}

func newStore(pool *pgxpool.Pool, schema, consumer string) *store {
	return &store{
		pool:      pool,
		consumer:  consumer,
		processed: pgx.Identifier{schema, ProcessedTable}.Sanitize(),
		dl:        pgx.Identifier{schema, DeadLetterTable}.Sanitize(),
	}
}

// lockSQL takes the transaction-scoped advisory lock of one consumer's
// aggregate. The consumer holds it while it applies or parks an event;
// Retry and Discard hold it while they work on the aggregate, so the two
// never interleave and parked events are applied in arrival order.
const lockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2 || '/' || $3, 0))`

// check reads, under the aggregate's lock, whether the event already has a
// dead-letter row and whether its aggregate is quarantined (has open rows).
func (s *store) check(ctx context.Context, tx pgx.Tx, ev *Event) (known, quarantined bool, err error) {
	b := &pgx.Batch{}
	b.Queue(lockSQL, s.consumer, ev.AggregateType, ev.AggregateID)
	b.Queue(`SELECT EXISTS (SELECT 1 FROM `+s.dl+` WHERE consumer = $1 AND event_id = $2),
		EXISTS (SELECT 1 FROM `+s.dl+` WHERE consumer = $1 AND aggregate_type = $3 AND aggregate_id = $4 AND status IN ('dead', 'parked'))`,
		s.consumer, ev.ID, ev.AggregateType, ev.AggregateID)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return false, false, err
	}
	if err := br.QueryRow().Scan(&known, &quarantined); err != nil {
		br.Close()
		return false, false, err
	}
	return known, quarantined, br.Close()
}

// register inserts the processed_events row; false means it was there
// already (a duplicate).
func (s *store) register(ctx context.Context, tx pgx.Tx, ev *Event) (bool, error) {
	var inserted bool
	err := tx.QueryRow(ctx, `INSERT INTO `+s.processed+` (consumer, event_id, aggregate_type, aggregate_id, aggregate_version,
		event_type, topic, kafka_partition, kafka_offset) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (consumer, event_id) DO NOTHING RETURNING true`,
		s.consumer, ev.ID, ev.AggregateType, ev.AggregateID, ev.AggregateVersion, ev.EventType,
		ev.Topic, ev.Partition, ev.Offset).Scan(&inserted)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return inserted, err
}

// insertDead writes ev to the dead-letter table with status (dead or
// parked). An existing row (a redelivery) is left as it is.
func (s *store) insertDead(ctx context.Context, tx pgx.Tx, ev *Event, status, reason string, attempts int) error {
	var headers any
	if len(ev.Headers) > 0 {
		headers = ev.Headers
	}
	var recTime any
	if !ev.Time.IsZero() {
		recTime = ev.Time
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+s.dl+` (consumer, event_id, aggregate_type, aggregate_id, aggregate_version, event_type,
		schema_version, headers, payload, topic, kafka_partition, kafka_offset, record_time, status, reason, attempts)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
		ON CONFLICT (consumer, event_id) DO NOTHING`,
		s.consumer, ev.ID, ev.AggregateType, ev.AggregateID, ev.AggregateVersion, ev.EventType, ev.SchemaVersion,
		headers, ev.Payload, ev.Topic, ev.Partition, ev.Offset, recTime, status, reason, attempts)
	return err
}

// deadLetter writes ev as the dead event of its aggregate, in its own
// transaction under the aggregate's lock.
func (s *store) deadLetter(ctx context.Context, ev *Event, reason string, attempts int) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, lockSQL, s.consumer, ev.AggregateType, ev.AggregateID); err != nil {
		return err
	}
	if err := s.insertDead(ctx, tx, ev, "dead", reason, attempts); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// prune deletes processed_events rows of this consumer older than age, in
// bounded batches, and returns how many it deleted.
func (s *store) prune(ctx context.Context, age time.Duration, batch int) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.processed+` WHERE ctid = ANY (ARRAY (
			SELECT ctid FROM `+s.processed+` WHERE consumer = $1 AND processed_at < now() - make_interval(secs => $2) LIMIT $3))`,
			s.consumer, age.Seconds(), batch)
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", ProcessedTable, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// isTransientPG reports whether err is an infrastructure failure of
// PostgreSQL (connection lost, server shutting down, out of resources,
// serialization failure or deadlock) rather than something the event or
// the handler did: those are retried without counting an attempt and never
// dead-letter an event.
func isTransientPG(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "40001", pgErr.Code == "40P01": // serialization_failure, deadlock_detected
			return true
		case len(pgErr.Code) == 5 && (pgErr.Code[:2] == "08" || pgErr.Code[:2] == "53" || pgErr.Code[:3] == "57P"):
			return true
		}
		return false
	}
	return pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}
