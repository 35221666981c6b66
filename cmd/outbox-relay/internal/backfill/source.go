package backfill

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

// DB is what a Source reads through: a pgx.Tx, so that counting and
// reading see one snapshot.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// HeaderReplay marks re-published records; its value is Source.Mark.
const HeaderReplay = "outbox_replay"

// Selection selects outbox rows. The zero value selects every row.
type Selection struct {
	// FromXid keeps rows whose xid is >= *FromXid (a fence's Xmin); nil
	// keeps all.
	FromXid *uint64
	// ToXid keeps rows whose xid is < *ToXid (a fence's Xmax); nil keeps all.
	ToXid *uint64
	// Since and Until bound the rows' commit timestamps (zero: unbounded).
	// They apply only with track_commit_timestamp on (Source.CommitTS);
	// rows without a commit timestamp are kept.
	Since, Until time.Time
	// AggregateType, AggregateID and EventType, when set, must match.
	AggregateType, AggregateID, EventType string
	// SkipQuarantined leaves out every aggregate with open (dead or
	// parked) dead-letter rows; otherwise only the events that have an
	// open dead-letter row are left out.
	SkipQuarantined bool
}

// Source reads one outbox table.
type Source struct {
	Table  migrations.Table
	Schema migrations.Schema
	// CommitTS says track_commit_timestamp is on (see CommitTimestamps).
	CommitTS bool
	// Mark is the HeaderReplay value; empty adds no header.
	Mark string
	// Pos is the TxLSN given to every event read (their ordinals count
	// up): their place in dead-letter order, should one be parked.
	Pos pglogrepl.LSN
}

// CommitTimestamps reports whether track_commit_timestamp is on.
func CommitTimestamps(ctx context.Context, db DB) (bool, error) {
	var v string
	if err := db.QueryRow(ctx, `SELECT current_setting('track_commit_timestamp')`).Scan(&v); err != nil {
		return false, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	return v == "on", nil
}

// xidCond compares the row's 32-bit xmin with a 64-bit xid through age(),
// which counts back from the same reference for both.
func xidCond(op, arg string) string {
	return fmt.Sprintf("age(o.xmin) %s age((%s::bigint %% 4294967296)::text::xid)", op, arg)
}

func (s *Source) where(w Selection) (string, []any) {
	args := []any{s.Table.String()}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	conds := []string{"true"}
	if w.FromXid != nil {
		conds = append(conds, xidCond("<=", arg(int64(*w.FromXid))))
	}
	if w.ToXid != nil {
		conds = append(conds, xidCond(">", arg(int64(*w.ToXid))))
	}
	if s.CommitTS && !w.Since.IsZero() {
		conds = append(conds, "coalesce(pg_xact_commit_timestamp(o.xmin) >= "+arg(w.Since)+", true)")
	}
	if s.CommitTS && !w.Until.IsZero() {
		conds = append(conds, "coalesce(pg_xact_commit_timestamp(o.xmin) <= "+arg(w.Until)+", true)")
	}
	if w.AggregateType != "" {
		conds = append(conds, "o.aggregate_type = "+arg(w.AggregateType))
	}
	if w.AggregateID != "" {
		conds = append(conds, "o.aggregate_id = "+arg(w.AggregateID))
	}
	if w.EventType != "" {
		conds = append(conds, "o.event_type = "+arg(w.EventType))
	}
	dl := migrations.DeadLetterTable(s.Table).Quoted()
	if w.SkipQuarantined {
		conds = append(conds, `NOT EXISTS (SELECT 1 FROM `+dl+` d WHERE d.outbox_table = $1
			AND d.aggregate_type = o.aggregate_type AND d.aggregate_id = o.aggregate_id AND d.status IN ('dead', 'parked'))`)
	} else {
		conds = append(conds, `NOT EXISTS (SELECT 1 FROM `+dl+` d WHERE d.outbox_table = $1
			AND d.event_id = o.event_id::text AND d.status IN ('dead', 'parked'))`)
	}
	return strings.Join(conds, "\n  AND "), args
}

// Count returns the number of rows in w.
func (s *Source) Count(ctx context.Context, db DB, w Selection) (int64, error) {
	where, args := s.where(w)
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+s.Table.Quoted()+` o WHERE `+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s: %w", s.Table, err)
	}
	return n, nil
}

// Quarantined returns the number of aggregates with open dead-letter rows
// (left out of a selection with SkipQuarantined).
func (s *Source) Quarantined(ctx context.Context, db DB) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT count(DISTINCT (aggregate_type, aggregate_id)) FROM `+
		migrations.DeadLetterTable(s.Table).Quoted()+` WHERE outbox_table = $1 AND status IN ('dead', 'parked')`,
		s.Table.String()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count quarantined aggregates: %w", err)
	}
	return n, nil
}

func (s *Source) selectSQL(w Selection) (string, []any) {
	where, args := s.where(w)
	// The payload travels as bytes: bytea raw, the others as the text
	// PostgreSQL renders (what the WAL carries too).
	payload := "convert_to(o.payload::text, 'UTF8')"
	if s.Schema.PayloadType == migrations.PayloadBytea {
		payload = "o.payload"
	}
	headers := "NULL::text"
	if s.Schema.HasHeaders {
		headers = "o.headers::text"
	}
	if s.Mark != "" {
		args = append(args, s.Mark)
		m := fmt.Sprintf("jsonb_build_object('%s', $%d::text)", HeaderReplay, len(args))
		if s.Schema.HasHeaders {
			headers = fmt.Sprintf(`CASE WHEN o.headers IS NULL THEN %[1]s::text
				WHEN jsonb_typeof(o.headers::jsonb) = 'object' THEN (o.headers::jsonb || %[1]s)::text
				ELSE o.headers::text END`, m)
		} else {
			headers = m + "::text"
		}
	}
	created := "NULL::timestamptz"
	if s.Schema.HasCreatedAt {
		created = "o.created_at::timestamptz"
	}
	commit := created
	order := "o.aggregate_type, o.aggregate_id, o.aggregate_version"
	if s.Schema.HasCreatedAt {
		order += ", o.created_at"
	}
	order += ", o.event_id"
	if s.CommitTS {
		commit = "coalesce(pg_xact_commit_timestamp(o.xmin), " + created + ")"
		order = "pg_xact_commit_timestamp(o.xmin) NULLS FIRST, o.aggregate_version, o.event_id"
	}
	return `SELECT o.event_id::text, o.aggregate_type, o.aggregate_id, o.aggregate_version::text, o.event_type,
		o.schema_version::text, ` + payload + `, ` + headers + `, ` + commit + `
	FROM ` + s.Table.Quoted() + ` o
	WHERE ` + where + `
	ORDER BY ` + order, args
}

// Scan calls fn for every row of w in publishing order. The events own
// their memory.
func (s *Source) Scan(ctx context.Context, db DB, w Selection, fn func(*replication.WALEvent) error) error {
	q, args := s.selectSQL(w)
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("read %s: %w", s.Table, err)
	}
	defer rows.Close()
	ordinal := 0
	for rows.Next() {
		var id, aggType, aggID, aggVersion, evType, schemaVersion, headers *string
		var payload []byte
		var commit *time.Time
		if err := rows.Scan(&id, &aggType, &aggID, &aggVersion, &evType, &schemaVersion, &payload, &headers, &commit); err != nil {
			return fmt.Errorf("read %s: %w", s.Table, err)
		}
		ev := &replication.WALEvent{Row: record.Row{Payload: payload}, TxLSN: s.Pos, Ordinal: ordinal}
		ordinal++
		str := func(p *string, col string) string {
			if p == nil {
				if ev.Invalid == "" {
					ev.Invalid = fmt.Sprintf("column %q is NULL", col)
				}
				return ""
			}
			return *p
		}
		ev.EventID = str(id, migrations.ColEventID)
		ev.AggregateType = str(aggType, migrations.ColAggregateType)
		ev.AggregateID = str(aggID, migrations.ColAggregateID)
		ev.AggregateVersion = str(aggVersion, migrations.ColAggregateVersion)
		ev.EventType = str(evType, migrations.ColEventType)
		ev.SchemaVersion = str(schemaVersion, migrations.ColSchemaVersion)
		if payload == nil && ev.Invalid == "" {
			ev.Invalid = replication.InvalidNullPayload
		}
		if headers != nil {
			ev.Headers = []byte(*headers)
		}
		if commit != nil {
			ev.CommitTime = *commit
		} else {
			ev.CommitTime = time.Now()
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", s.Table, err)
	}
	return nil
}
