package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/record"
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

// aggregateKey names one aggregate.
type aggregateKey struct{ typ, id string }

// lockBatchSQL takes the advisory locks of a batch's aggregates (the keys
// of lockSQL) in one statement, in the order of the lock keys: two
// transactions that lock overlapping sets in the same order cannot
// deadlock. The volatile lock function is evaluated after the sort.
const lockBatchSQL = `SELECT pg_advisory_xact_lock(k) FROM (
	SELECT DISTINCT hashtextextended($1 || '/' || t || '/' || i, 0) AS k FROM unnest($2::text[], $3::text[]) AS u(t, i)) s ORDER BY k`

// checkBatch locks the batch's aggregates and reads which of its events
// already have a dead-letter row (known) and which of its aggregates wait
// on an open one (waiting), in one round trip.
func (s *store) checkBatch(ctx context.Context, tx pgx.Tx, evs []*record.Event) (known map[string]bool, waiting map[aggregateKey]bool, err error) {
	ids := make([]string, len(evs))
	types := make([]string, len(evs))
	aggs := make([]string, len(evs))
	for i, ev := range evs {
		ids[i], types[i], aggs[i] = ev.ID, ev.AggregateType, ev.AggregateID
	}
	b := &pgx.Batch{}
	b.Queue(lockBatchSQL, s.consumer, types, aggs)
	b.Queue(`SELECT true, event_id::text, '', '' FROM `+s.dl+` WHERE consumer = $1 AND event_id = ANY ($2::text[]::uuid[])
		UNION ALL
		SELECT DISTINCT false, '', aggregate_type, aggregate_id FROM `+s.dl+` WHERE consumer = $1 AND status IN ('dead', 'parked')
			AND (aggregate_type, aggregate_id) IN (SELECT * FROM unnest($3::text[], $4::text[]))`,
		s.consumer, ids, types, aggs)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var isEvent bool
		var id, typ, agg string
		if err := rows.Scan(&isEvent, &id, &typ, &agg); err != nil {
			return nil, nil, err
		}
		if isEvent {
			if known == nil {
				known = map[string]bool{}
			}
			known[id] = true
		} else {
			if waiting == nil {
				waiting = map[aggregateKey]bool{}
			}
			waiting[aggregateKey{typ, agg}] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return known, waiting, br.Close()
}

// registerBatch parks the events of waiting aggregates and inserts the
// processed_events rows of the candidates in one statement, in one round
// trip. It returns the IDs it inserted: the others were processed already
// (duplicates).
func (s *store) registerBatch(ctx context.Context, tx pgx.Tx, candidates, park []*record.Event) (map[string]struct{}, error) {
	b := &pgx.Batch{}
	for _, ev := range park {
		s.queueDead(b, ev, "parked", "aggregate waits on an earlier dead-lettered event", 0)
	}
	n := len(candidates)
	if n > 0 {
		ids, types, aggs, evTypes, topics := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		versions, offsets := make([]int64, n), make([]int64, n)
		partitions := make([]int32, n)
		for i, ev := range candidates {
			ids[i], types[i], aggs[i], evTypes[i], topics[i] = ev.ID, ev.AggregateType, ev.AggregateID, ev.EventType, ev.Topic
			versions[i], offsets[i], partitions[i] = ev.AggregateVersion, ev.Offset, int32(ev.Partition)
		}
		b.Queue(`INSERT INTO `+s.processed+` (consumer, event_id, aggregate_type, aggregate_id, aggregate_version,
			event_type, topic, kafka_partition, kafka_offset)
			SELECT $1, u.id::uuid, u.t, u.a, u.v, u.e, u.topic, u.p, u.o
			FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::int[], $9::bigint[])
				AS u(id, t, a, v, e, topic, p, o)
			ON CONFLICT (consumer, event_id) DO NOTHING RETURNING event_id::text`,
			s.consumer, ids, types, aggs, versions, evTypes, topics, partitions, offsets)
	}
	if b.Len() == 0 {
		return nil, nil
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for range park {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	fresh := make(map[string]struct{}, n)
	if n > 0 {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			fresh[id] = struct{}{}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return fresh, br.Close()
}

// insertDeadSQL writes an event to the dead-letter table with a status
// (dead or parked). An existing row (a redelivery) is left as it is.
const insertDeadSQL = `INSERT INTO %s (consumer, event_id, aggregate_type, aggregate_id, aggregate_version, event_type,
	schema_version, headers, payload, topic, kafka_partition, kafka_offset, record_time, status, reason, attempts)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
	ON CONFLICT (consumer, event_id) DO NOTHING`

// deadArgs are insertDeadSQL's arguments for ev.
func (s *store) deadArgs(ev *record.Event, status, reason string, attempts int) []any {
	var headers any
	if len(ev.Headers) > 0 {
		headers = ev.Headers
	}
	var recTime any
	if !ev.Time.IsZero() {
		recTime = ev.Time
	}
	return []any{s.consumer, ev.ID, ev.AggregateType, ev.AggregateID, ev.AggregateVersion, ev.EventType, ev.SchemaVersion,
		headers, ev.Payload, ev.Topic, ev.Partition, ev.Offset, recTime, status, reason, attempts}
}

// insertDead writes ev to the dead-letter table with status (dead or
// parked). An existing row (a redelivery) is left as it is.
func (s *store) insertDead(ctx context.Context, tx pgx.Tx, ev *record.Event, status, reason string, attempts int) error {
	_, err := tx.Exec(ctx, fmt.Sprintf(insertDeadSQL, s.dl), s.deadArgs(ev, status, reason, attempts)...)
	return err
}

// queueDead queues insertDead on b.
func (s *store) queueDead(b *pgx.Batch, ev *record.Event, status, reason string, attempts int) {
	b.Queue(fmt.Sprintf(insertDeadSQL, s.dl), s.deadArgs(ev, status, reason, attempts)...)
}

// deadLetter writes ev as the dead event of its aggregate, in its own
// transaction under the aggregate's lock.
func (s *store) deadLetter(ctx context.Context, ev *record.Event, reason string, attempts int) error {
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
