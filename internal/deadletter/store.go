package deadletter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Row statuses.
const (
	StatusDead      = "dead"      // the poison event itself
	StatusParked    = "parked"    // a later event of a quarantined aggregate
	StatusPublished = "published" // re-published by an operator retry
	StatusDiscarded = "discarded" // dropped by an operator, with a reason
)

// DB is the subset of pgx.Conn / pgxpool.Pool the store uses.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Aggregate identifies an aggregate: order is promised per aggregate.
type Aggregate struct {
	Type, ID string
}

func (a Aggregate) String() string { return a.Type + "/" + a.ID }

// Entry is one dead-letter row.
type Entry struct {
	EventID          string
	Aggregate        Aggregate
	AggregateVersion *int64
	EventType        string
	SchemaVersion    *int32
	Payload          []byte
	Headers          *string
	Topic            string
	Pos              replication.Position
	CommitTime       time.Time
	Status           string
	Reason           string
	Class            string
	Attempts         int
	FirstFailedAt    time.Time
	LastFailedAt     time.Time
	ResolvedAt       *time.Time
	Resolution       *string
}

// Store reads and writes the dead-letter rows of one outbox table.
type Store struct {
	db     DB
	outbox string // outbox table name as recorded in rows
	table  string // quoted dead-letter table
}

// NewStore returns the store for outbox table t.
func NewStore(db DB, t migrations.Table) *Store {
	return &Store{db: db, outbox: t.String(), table: migrations.DeadLetterTable(t).Quoted()}
}

// Check verifies the dead-letter table exists.
func (s *Store) Check(ctx context.Context) error {
	return migrations.CheckTable(ctx, s.db, "dead-letter table", s.table,
		migrations.Added{Migration: 5, Columns: []string{"system_identifier"}})
}

// systemID is the server's system identifier as SQL. Dead-letter
// positions are LSNs of the system that wrote them: a row of another
// system (a dump restored into a new cluster, whose LSNs start lower) is
// earlier than every new event of its aggregate. pg_control_system() is
// executable by every role.
const systemID = `(SELECT system_identifier::text FROM pg_control_system())`

// sameSystem is true for a row this system wrote; rows written before
// migration 5 have no system identifier and count as this system's.
const sameSystem = `coalesce(system_identifier = ` + systemID + `, true)`

// lockKey is the advisory lock of one aggregate's quarantine.
const lockKey = `hashtextextended($1 || '/' || $2 || '/' || $3, 0)`

// insert writes ev with status in tx. A row for the same event (a
// redelivery) is left as it is.
func (s *Store) insert(ctx context.Context, tx pgx.Tx, ev *replication.WALEvent, topic, status, class, reason string) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+s.table+` (outbox_table, event_id, aggregate_type, aggregate_id,
			aggregate_version, event_type, schema_version, payload, headers, topic, tx_lsn, tx_ordinal,
			commit_time, status, reason, class, system_identifier)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::text::pg_lsn, $12, $13, $14, $15, $16, `+systemID+`)
		ON CONFLICT (outbox_table, event_id) DO NOTHING`,
		s.outbox, eventKey(ev), ev.AggregateType, ev.AggregateID, intOrNil(ev.AggregateVersion), ev.EventType,
		intOrNil(ev.SchemaVersion), ev.Payload, textOrNil(ev.Headers), topic, ev.TxLSN.String(), ev.Ordinal,
		ev.CommitTime, status, reason, class)
	if err != nil {
		return fmt.Errorf("dead-letter event %s: %w", ev.EventID, err)
	}
	return nil
}

// eventKey is the row key of ev; an event without an id (impossible with
// the default primary key, possible with a user's table) is keyed by its
// position.
func eventKey(ev *replication.WALEvent) string {
	if ev.EventID != "" {
		return ev.EventID
	}
	return fmt.Sprintf("position:%s:%d", ev.TxLSN, ev.Ordinal)
}

func intOrNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func textOrNil(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// open returns, for every quarantined aggregate, the position of its
// earliest open row. A row written by another system counts as position
// 0/0, before every event this system decodes.
func (s *Store) open(ctx context.Context) (map[Aggregate]replication.Position, error) {
	rows, err := s.db.Query(ctx, `SELECT DISTINCT ON (aggregate_type, aggregate_id) aggregate_type, aggregate_id,
			pos_lsn::text AS pos_lsn_text, pos_ordinal
		FROM (SELECT aggregate_type, aggregate_id,
				CASE WHEN `+sameSystem+` THEN tx_lsn ELSE '0/0'::pg_lsn END AS pos_lsn,
				CASE WHEN `+sameSystem+` THEN tx_ordinal ELSE 0 END AS pos_ordinal
			FROM `+s.table+` WHERE outbox_table = $1 AND status IN ('dead', 'parked')) AS o
		ORDER BY aggregate_type, aggregate_id, pos_lsn, pos_ordinal`, s.outbox)
	if err != nil {
		return nil, fmt.Errorf("read quarantined aggregates: %w", err)
	}
	defer rows.Close()
	out := map[Aggregate]replication.Position{}
	for rows.Next() {
		var a Aggregate
		var lsn string
		var ord int
		if err := rows.Scan(&a.Type, &a.ID, &lsn, &ord); err != nil {
			return nil, err
		}
		l, err := pglogrepl.ParseLSN(lsn)
		if err != nil {
			return nil, err
		}
		out[a] = replication.Position{TxLSN: l, Ordinal: ord}
	}
	return out, rows.Err()
}

// maxResolvedAhead bounds how many resolved events ahead of the stream's
// start Reload keeps in memory. They can only be the events of ranges
// the relay wrote but never confirmed (at most its in-flight window),
// so more means a table the relay does not understand; the excess is
// logged and published again, at least once as before.
const maxResolvedAhead = 100_000

// resolvedSince returns, by event id, the status of the events this
// system's relay dead-lettered or parked at or after lsn (the commit LSN
// of their transaction) and an operator resolved since: published by a
// dlq retry, or discarded. The stream redelivers them when it restarts
// before its position passed them (see Queue.Hold).
func (s *Store) resolvedSince(ctx context.Context, lsn pglogrepl.LSN) (map[string]string, error) {
	rows, err := s.db.Query(ctx, `SELECT event_id, status FROM `+s.table+` WHERE outbox_table = $1
		AND status IN ('published', 'discarded') AND system_identifier = `+systemID+` AND tx_lsn >= $2::pg_lsn
		ORDER BY tx_lsn, tx_ordinal LIMIT `+fmt.Sprint(maxResolvedAhead+1), s.outbox, lsn.String())
	if err != nil {
		return nil, fmt.Errorf("read resolved events: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			return nil, err
		}
		out[id] = status
	}
	return out, rows.Err()
}

const entryColumns = `event_id, aggregate_type, aggregate_id, aggregate_version, coalesce(event_type, ''),
	schema_version, payload, headers, coalesce(topic, ''), tx_lsn::text AS tx_lsn_text, tx_ordinal, coalesce(commit_time, 'epoch'),
	status, reason, class, attempts, first_failed_at, last_failed_at, resolved_at, resolution`

func scanEntry(row pgx.Row) (Entry, error) {
	var e Entry
	var lsn string
	err := row.Scan(&e.EventID, &e.Aggregate.Type, &e.Aggregate.ID, &e.AggregateVersion, &e.EventType,
		&e.SchemaVersion, &e.Payload, &e.Headers, &e.Topic, &lsn, &e.Pos.Ordinal, &e.CommitTime,
		&e.Status, &e.Reason, &e.Class, &e.Attempts, &e.FirstFailedAt, &e.LastFailedAt, &e.ResolvedAt, &e.Resolution)
	if err != nil {
		return e, err
	}
	e.Pos.TxLSN, err = pglogrepl.ParseLSN(lsn)
	return e, err
}

// ErrEntryNotFound is returned for an event the table does not hold, and
// for an aggregate with no open entry (FindAggregate).
var ErrEntryNotFound = errors.New("no dead-letter entry")

// Get returns one entry.
func (s *Store) Get(ctx context.Context, eventID string) (Entry, error) {
	e, err := scanEntry(s.db.QueryRow(ctx, `SELECT `+entryColumns+` FROM `+s.table+
		` WHERE outbox_table = $1 AND event_id = $2`, s.outbox, eventID))
	if errors.Is(err, pgx.ErrNoRows) {
		return e, fmt.Errorf("event %s: %w", eventID, ErrEntryNotFound)
	}
	return e, err
}

// Filter narrows List.
type Filter struct {
	// AggregateID and AggregateType select one aggregate (type optional).
	AggregateID, AggregateType string
	// All includes resolved rows (published, discarded).
	All   bool
	Limit int
}

// List returns entries in commit order, as the quarantine and a retry see
// it: rows another system wrote (before a restore or an upgrade by
// dump/restore) first, since they predate everything this system wrote.
func (s *Store) List(ctx context.Context, f Filter) ([]Entry, error) {
	q := `SELECT ` + entryColumns + ` FROM ` + s.table + ` WHERE outbox_table = $1
		AND ($2 = '' OR aggregate_id = $2) AND ($3 = '' OR aggregate_type = $3)
		AND ($4 OR status IN ('dead', 'parked'))
		ORDER BY ` + sameSystem + `, tx_lsn, tx_ordinal, event_id LIMIT $5`
	if f.Limit <= 0 {
		f.Limit = 1000
	}
	rows, err := s.db.Query(ctx, q, s.outbox, f.AggregateID, f.AggregateType, f.All, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list dead-letter entries: %w", err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
