//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Event is one outbox row as written by a test.
type Event struct {
	ID            string
	AggregateType string
	AggregateID   string
	Version       int64
	EventType     string
	SchemaVersion int
	TraceID       string
	CommitTime    time.Time // time.Now() right after COMMIT returned
}

// Ledger records what was committed and what was rolled back. Safe for
// concurrent use.
type Ledger struct {
	mu         sync.Mutex
	committed  map[string]Event
	order      []string // committed ids in commit order (per writer)
	rolledBack map[string]Event
	// pending holds events whose COMMIT was sent but not yet recorded
	// (or whose outcome stayed unknown): the relay may deliver them
	// before the writer records them.
	pending    map[string]Event
	commitLSNs []string // pg_current_wal_insert_lsn() right after each commit
}

func NewLedger() *Ledger {
	return &Ledger{committed: map[string]Event{}, rolledBack: map[string]Event{}, pending: map[string]Event{}}
}

// addPending records evs as being committed, before COMMIT is sent.
func (l *Ledger) addPending(evs []Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range evs {
		l.pending[e.ID] = e
	}
}

// Pending returns a copy of the events whose COMMIT was sent but whose
// outcome is not recorded yet: a check taken while writers run allows them.
func (l *Ledger) Pending() map[string]Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.pending)
}

func (l *Ledger) addCommitted(evs []Event, lsn string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range evs {
		l.committed[e.ID] = e
		l.order = append(l.order, e.ID)
		delete(l.pending, e.ID)
	}
	if lsn != "" {
		l.commitLSNs = append(l.commitLSNs, lsn)
	}
}

func (l *Ledger) addRolledBack(evs []Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range evs {
		l.rolledBack[e.ID] = e
		delete(l.pending, e.ID)
	}
}

// Committed returns a copy of the committed events by id.
func (l *Ledger) Committed() map[string]Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.committed)
}

// RolledBack returns a copy of the rolled-back events by id.
func (l *Ledger) RolledBack() map[string]Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.rolledBack)
}

// CommittedCount is the number of committed events.
func (l *Ledger) CommittedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.committed)
}

// LastCommitLSN is the WAL insert LSN captured right after the latest commit.
func (l *Ledger) LastCommitLSN() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.commitLSNs) == 0 {
		return ""
	}
	return l.commitLSNs[len(l.commitLSNs)-1]
}

// FirstCommitLSN is the WAL insert LSN captured right after the first commit.
func (l *Ledger) FirstCommitLSN() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.commitLSNs) == 0 {
		return ""
	}
	return l.commitLSNs[0]
}

// Writer inserts outbox rows with plain SQL.
type Writer struct {
	DB            *DB
	Table         string // sanitized identifier
	AggregateType string
	EventType     string
	SchemaVersion int
	Ledger        *Ledger
	CaptureLSN    bool // capture pg_current_wal_insert_lsn() after each commit

	mu       sync.Mutex
	versions map[string]int64
}

// NewWriter returns a Writer for env e recording into ledger.
func (e *Env) NewWriter(ledger *Ledger) *Writer {
	return &Writer{
		DB:            e.DB,
		Table:         e.QuotedTable(),
		AggregateType: e.AggType,
		EventType:     "OrderUpdated",
		SchemaVersion: 3,
		Ledger:        ledger,
		versions:      map[string]int64{},
	}
}

// NextEvents builds one event per aggregate id in aggIDs, each with the next
// aggregate_version for its aggregate. Versions are reserved even if the
// transaction later rolls back (gaps are fine, order is what matters).
func (w *Writer) NextEvents(aggIDs []string) []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.versions == nil {
		w.versions = map[string]int64{}
	}
	evs := make([]Event, len(aggIDs))
	for i, a := range aggIDs {
		w.versions[a]++
		id, err := uuid.NewV7()
		if err != nil {
			id = uuid.New()
		}
		evs[i] = Event{
			ID:            id.String(),
			AggregateType: w.AggregateType,
			AggregateID:   a,
			Version:       w.versions[a],
			EventType:     w.EventType,
			SchemaVersion: w.SchemaVersion,
			TraceID:       "trace-" + uuid.NewString(),
		}
	}
	return evs
}

// InsertTx inserts evs in one transaction and commits it (commit=true) or
// rolls it back. Committed and rolled-back events are recorded in the ledger.
func (w *Writer) InsertTx(ctx context.Context, evs []Event, commit bool) error {
	tx, err := w.DB.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if err := insertEvents(ctx, tx, w.Table, evs); err != nil {
		return err
	}
	if !commit {
		if err := tx.Rollback(ctx); err != nil {
			return err
		}
		w.Ledger.addRolledBack(evs)
		return nil
	}
	w.Ledger.addPending(evs)
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	now := time.Now()
	for i := range evs {
		evs[i].CommitTime = now
	}
	lsn := ""
	if w.CaptureLSN {
		if err := w.DB.QueryRow(ctx, `select pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
			return fmt.Errorf("capture lsn: %w", err)
		}
	}
	w.Ledger.addCommitted(evs, lsn)
	return nil
}

// Write builds the next events for aggIDs and inserts them in one transaction.
func (w *Writer) Write(ctx context.Context, aggIDs []string, commit bool) ([]Event, error) {
	evs := w.NextEvents(aggIDs)
	return evs, w.InsertTx(ctx, evs, commit)
}

func insertEvents(ctx context.Context, tx pgx.Tx, table string, evs []Event) error {
	const cols = 8
	var sb strings.Builder
	sb.WriteString("insert into ")
	sb.WriteString(table)
	sb.WriteString(" (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload, headers) values ")
	args := make([]any, 0, len(evs)*cols)
	for i, e := range evs {
		if i > 0 {
			sb.WriteString(", ")
		}
		b := i * cols
		fmt.Fprintf(&sb, "($%d::uuid, $%d, $%d, $%d, $%d, $%d, $%d::jsonb, $%d::jsonb)", b+1, b+2, b+3, b+4, b+5, b+6, b+7, b+8)
		payload, _ := json.Marshal(map[string]any{"aggregate_id": e.AggregateID, "version": e.Version, "note": "integration"})
		headers, _ := json.Marshal(map[string]string{"trace_id": e.TraceID})
		args = append(args, e.ID, e.AggregateType, e.AggregateID, e.Version, e.EventType, e.SchemaVersion, string(payload), string(headers))
	}
	_, err := tx.Exec(ctx, sb.String(), args...)
	return err
}

// ExpectedFromTable reads every row of the outbox table into Events (used
// when rows were generated in SQL). CommitTime is left zero.
func ExpectedFromTable(t testing.TB, db *DB, table string) map[string]Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := map[string]Event{}
	err := db.WithConn(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `select event_id::text, aggregate_type, aggregate_id, aggregate_version::bigint,
		event_type, schema_version::int, coalesce(headers->>'trace_id', '') from `+table)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e Event
			if err := rows.Scan(&e.ID, &e.AggregateType, &e.AggregateID, &e.Version, &e.EventType, &e.SchemaVersion, &e.TraceID); err != nil {
				return err
			}
			out[e.ID] = e
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatalf("read expected rows: %v", err)
	}
	return out
}
