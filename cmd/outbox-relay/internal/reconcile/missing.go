package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// MissingEvent is an event of the window that no Kafka record carries.
type MissingEvent struct {
	EventID, AggregateType, AggregateID string
	AggregateVersion                    int64
	EventType                           string
	CreatedAt                           time.Time
	// DeadLetter is the relay's dead-letter status of the event ("dead" or
	// "parked" while its aggregate is quarantined), "" when it has none:
	// it tells a poison event from a lost one.
	DeadLetter string
}

// String is the event's line in the report.
func (e MissingEvent) String() string {
	s := fmt.Sprintf("%s  %s %s v%d  %s  committed %s", e.EventID, e.AggregateType, e.AggregateID, e.AggregateVersion,
		e.EventType, e.CreatedAt.UTC().Format(time.RFC3339))
	if e.DeadLetter != "" {
		s += "  (relay dead-letter: " + e.DeadLetter + ")"
	}
	return s
}

// UnconsumedEvent is an event in Kafka the consumer neither processed nor
// dead-lettered.
type UnconsumedEvent struct {
	EventID, AggregateID string
	AggregateVersion     int64
	EventType            string
}

// String is the event's line in the report.
func (e UnconsumedEvent) String() string {
	return fmt.Sprintf("%s  %s v%d  %s", e.EventID, e.AggregateID, e.AggregateVersion, e.EventType)
}

// listMissingKafka returns up to MaxList events of the window that no
// Kafka record carries, with the relay's dead-letter status when it has
// one.
func (r *run) listMissingKafka(ctx context.Context) ([]MissingEvent, error) {
	dl := migrations.DeadLetterTable(r.cfg.Table)
	var hasDL bool
	if err := r.conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, dl.Quoted()).Scan(&hasDL); err != nil {
		return nil, err
	}
	status := `''`
	args := append(r.windowArgs(), r.cfg.MaxList)
	if hasDL {
		args = append(args, r.cfg.Table.String())
		status = `coalesce((SELECT d.status FROM ` + dl.Quoted() + ` d WHERE d.outbox_table = $5 AND d.event_id = o.event_id::text), '')`
	}
	rows, err := r.conn.Query(ctx, `SELECT o.event_id::text, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.event_type, o.created_at, `+status+`
		FROM `+r.cfg.Table.Quoted()+` o WHERE `+windowCond+` AND NOT EXISTS (SELECT 1 FROM reconcile_seen s WHERE s.event_id = o.event_id)
		ORDER BY o.created_at, o.event_id LIMIT $4`, args...)
	if err != nil {
		return nil, fmt.Errorf("list missing: %w", err)
	}
	defer rows.Close()
	var out []MissingEvent
	for rows.Next() {
		var e MissingEvent
		if err := rows.Scan(&e.EventID, &e.AggregateType, &e.AggregateID, &e.AggregateVersion, &e.EventType, &e.CreatedAt, &e.DeadLetter); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
