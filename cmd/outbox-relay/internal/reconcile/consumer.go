package reconcile

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/configerr"
	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
)

// consumerChunk is how many events are looked up in the consumer's inbox
// at once.
const consumerChunk = 5000

// consumer looks events up in one consumer's inbox tables.
type consumer struct {
	pool            *pgxpool.Pool
	name            string
	processed, dead string // quoted tables
}

// outcome is what became of an event at the consumer.
type outcome int

const (
	notConsumed  outcome = iota
	processed            // in processed_events (or applied)
	deadLettered         // in inbox_dead_letter: dead, parked or discarded
)

// outcomeOf classifies an inbox status ("" when the inbox has no row).
func outcomeOf(status string) outcome {
	switch status {
	case "processed", "applied":
		return processed
	case "dead", "parked", "discarded":
		return deadLettered
	}
	return notConsumed
}

// states returns the inbox status of each of ids the inbox knows: the
// dead-letter row's status, or "processed" (which wins over it).
func (c *consumer) states(ctx context.Context, ids []string) (map[string]string, error) {
	state := map[string]string{}
	q := `SELECT event_id::text, 'processed' FROM ` + c.processed + ` WHERE consumer = $1 AND event_id = ANY($2::uuid[])
		UNION ALL SELECT event_id::text, status FROM ` + c.dead + ` WHERE consumer = $1 AND event_id = ANY($2::uuid[])`
	rows, err := c.pool.Query(ctx, q, c.name, ids)
	if err != nil {
		return nil, fmt.Errorf("consumer lookup: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		if state[id] != "processed" {
			state[id] = st
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("consumer lookup: %w", err)
	}
	return state, nil
}

// checkConsumer streams the window's events that reached Kafka and looks
// them up in the consumer's inbox in chunks, counting them per event type
// and listing up to MaxList not consumed.
func (r *run) checkConsumer(ctx context.Context) ([]UnconsumedEvent, error) {
	pc, err := pgxpool.ParseConfig(r.cfg.ConsumerURL)
	if err != nil {
		return nil, &configerr.Error{Err: fmt.Errorf("--consumer-database-url: %w", err)}
	}
	outboxdb.SetBeforeConnect(pc, r.deps.ConsumerBeforeConnect)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, &configerr.Error{Err: fmt.Errorf("--consumer-database-url: %w", err)}
	}
	defer pool.Close()
	c := &consumer{pool: pool, name: r.cfg.Consumer,
		processed: pgx.Identifier{r.cfg.ConsumerSchema, inbox.ProcessedTable}.Sanitize(),
		dead:      pgx.Identifier{r.cfg.ConsumerSchema, inbox.DeadLetterTable}.Sanitize()}
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL`, c.processed, c.dead).Scan(&ok); err != nil {
		return nil, fmt.Errorf("consumer database: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("consumer database has no %s or %s (wrong --consumer-schema or --consumer-database-url?)", c.processed, c.dead)
	}
	rows, err := r.conn.Query(ctx, `SELECT o.event_id::text, o.event_type, o.aggregate_id, o.aggregate_version FROM `+r.cfg.Table.Quoted()+` o
		WHERE `+windowCond+` AND EXISTS (SELECT 1 FROM reconcile_seen s WHERE s.event_id = o.event_id)`, r.windowArgs()...)
	if err != nil {
		return nil, fmt.Errorf("compare with consumer: %w", err)
	}
	defer rows.Close()
	var (
		buf     []UnconsumedEvent
		missing []UnconsumedEvent
	)
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		ids := make([]string, len(buf))
		for i, e := range buf {
			ids[i] = e.EventID
		}
		state, err := c.states(ctx, ids)
		if err != nil {
			return err
		}
		for _, e := range buf {
			tc := r.get(e.EventType)
			switch outcomeOf(state[e.EventID]) {
			case processed:
				tc.Processed++
			case deadLettered:
				tc.DeadLettered++
			default:
				tc.NotConsumed++
				if len(missing) < r.cfg.MaxList {
					missing = append(missing, e)
				}
			}
		}
		buf = buf[:0]
		return nil
	}
	for rows.Next() {
		var e UnconsumedEvent
		if err := rows.Scan(&e.EventID, &e.EventType, &e.AggregateID, &e.AggregateVersion); err != nil {
			return nil, err
		}
		buf = append(buf, e)
		if len(buf) == consumerChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("compare with consumer: %w", err)
	}
	return missing, flush()
}
