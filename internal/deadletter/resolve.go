package deadletter

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Writer publishes one event synchronously (publisher.SyncWriter).
type Writer interface {
	Write(ctx context.Context, ev *replication.WALEvent) error
}

// Outcome is what happened to one entry during a retry.
type Outcome struct {
	EventID string
	Status  string // published, or dead/parked when it still fails or was not reached
	Error   string
}

// Result of a retry or discard.
type Result struct {
	Aggregate Aggregate
	Outcomes  []Outcome
	// Lifted reports that the aggregate has no open rows left.
	Lifted bool
}

// Failed reports whether an event still fails.
func (r Result) Failed() bool {
	for _, o := range r.Outcomes {
		if o.Error != "" {
			return true
		}
	}
	return false
}

// ErrAmbiguous is returned when an aggregate id names several aggregates.
var ErrAmbiguous = errors.New("aggregate id matches several aggregate types")

// FindAggregate resolves an aggregate id (and optional type) to an
// aggregate with open rows.
func (s *Store) FindAggregate(ctx context.Context, id, typ string) (Aggregate, error) {
	rows, err := s.db.Query(ctx, `SELECT DISTINCT aggregate_type FROM `+s.table+` WHERE outbox_table = $1
		AND aggregate_id = $2 AND ($3 = '' OR aggregate_type = $3) AND status IN ('dead', 'parked')`, s.outbox, id, typ)
	if err != nil {
		return Aggregate{}, err
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return Aggregate{}, err
	}
	switch len(types) {
	case 0:
		return Aggregate{}, fmt.Errorf("aggregate %q: %w (nothing quarantined)", id, ErrEntryNotFound)
	case 1:
		return Aggregate{Type: types[0], ID: id}, nil
	}
	return Aggregate{}, fmt.Errorf("aggregate %q (types %v): %w; pass Target.AggregateType", id, types, ErrAmbiguous)
}

// Retry re-publishes agg's open rows in commit order through w, holding
// the aggregate's lock so the running relay parks or publishes its new
// events only afterwards. It stops at the first event that still fails:
// that one stays open (attempts + 1) and so does everything after it.
//
// It first waits, as g says, until the aggregate's earliest open row is
// behind the relay's delivered position, and otherwise returns an
// *AheadError having published nothing (see Guard).
func (s *Store) Retry(ctx context.Context, agg Aggregate, w Writer, g Guard) (Result, error) {
	return s.resolve(ctx, agg, w, g, "", nil)
}

// Discard marks eventID discarded with reason, then re-publishes the rest
// of its aggregate as Retry does, with the same guard: the parked events
// it publishes must not overtake what the relay has yet to deliver. A
// discard that leaves nothing to publish does not wait.
func (s *Store) Discard(ctx context.Context, eventID, reason string, w Writer, g Guard) (Result, error) {
	if reason == "" {
		return Result{}, errors.New("a discard needs a reason")
	}
	e, err := s.Get(ctx, eventID)
	if err != nil {
		return Result{}, err
	}
	if e.Status != StatusDead && e.Status != StatusParked {
		return Result{}, fmt.Errorf("event %s is %s, not open", eventID, e.Status)
	}
	return s.resolve(ctx, e.Aggregate, w, g, eventID, func(ctx context.Context, tx pgx.Tx) error {
		// The status is checked again under the aggregate's lock: a dlq
		// retry that held it may have published the event meanwhile, and
		// its record must not then say "discarded".
		tag, err := tx.Exec(ctx, `UPDATE `+s.table+` SET status = 'discarded', resolved_at = now(), resolution = $3
			WHERE outbox_table = $1 AND event_id = $2 AND status IN ('dead', 'parked')`, s.outbox, eventID, "discarded: "+reason)
		if err == nil && tag.RowsAffected() == 0 {
			return fmt.Errorf("event %s was resolved meanwhile (by a concurrent dlq retry or discard); nothing discarded: see dlq show %s", eventID, eventID)
		}
		return err
	})
}

// resolve publishes agg's open rows, after first (a discard's update of
// the row discarded, except). The guard is waited for before the lock is
// taken, since the relay may need the lock to replay what moves its
// position, and checked again under it, without waiting: a row written
// meanwhile (an earlier one, redelivered) may have become the earliest.
func (s *Store) resolve(ctx context.Context, agg Aggregate, w Writer, g Guard, except string, first func(context.Context, pgx.Tx) error) (Result, error) {
	res := Result{Aggregate: agg}
	if err := s.awaitBehind(ctx, agg, except, g); err != nil {
		return res, err
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return res, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+lockKey+`)`, s.outbox, agg.Type, agg.ID); err != nil {
		return res, fmt.Errorf("lock aggregate %s: %w", agg, err)
	}
	if a, err := s.ahead(ctx, tx, agg, except, g); err != nil {
		return res, err
	} else if a != nil {
		return res, a
	}
	if first != nil {
		if err := first(ctx, tx); err != nil {
			return res, err
		}
	}
	rows, err := tx.Query(ctx, `SELECT `+entryColumns+` FROM `+s.table+` WHERE outbox_table = $1
		AND aggregate_type = $2 AND aggregate_id = $3 AND status IN ('dead', 'parked')
		ORDER BY `+sameSystem+`, tx_lsn, tx_ordinal FOR UPDATE`, s.outbox, agg.Type, agg.ID)
	if err != nil {
		return res, err
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) { return scanEntry(r) })
	if err != nil {
		return res, err
	}
	failed := false
	for _, e := range entries {
		if failed {
			res.Outcomes = append(res.Outcomes, Outcome{EventID: e.EventID, Status: e.Status})
			continue
		}
		if err := w.Write(ctx, e.event()); err != nil {
			failed = true
			res.Outcomes = append(res.Outcomes, Outcome{EventID: e.EventID, Status: e.Status, Error: err.Error()})
			_, uerr := tx.Exec(ctx, `UPDATE `+s.table+` SET attempts = attempts + 1, last_failed_at = now(), reason = $3
				WHERE outbox_table = $1 AND event_id = $2`, s.outbox, e.EventID, "retry failed: "+err.Error())
			if uerr != nil {
				return res, uerr
			}
			continue
		}
		res.Outcomes = append(res.Outcomes, Outcome{EventID: e.EventID, Status: StatusPublished})
		_, err := tx.Exec(ctx, `UPDATE `+s.table+` SET status = 'published', resolved_at = now(), resolution = 'retried'
			WHERE outbox_table = $1 AND event_id = $2`, s.outbox, e.EventID)
		if err != nil {
			return res, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("commit: %w (events may have been published; a new retry re-publishes them)", err)
	}
	res.Lifted = !failed
	return res, nil
}

// event rebuilds the event an entry holds.
func (e Entry) event() *replication.WALEvent {
	ev := &replication.WALEvent{
		Row:     record.Row{EventID: e.EventID, AggregateType: e.Aggregate.Type, AggregateID: e.Aggregate.ID, EventType: e.EventType, Payload: e.Payload, CommitTime: e.CommitTime},
		TxLSN:   e.Pos.TxLSN,
		Ordinal: e.Pos.Ordinal,
	}
	if e.AggregateVersion != nil {
		ev.AggregateVersion = strconv.FormatInt(*e.AggregateVersion, 10)
	}
	if e.SchemaVersion != nil {
		ev.SchemaVersion = strconv.FormatInt(int64(*e.SchemaVersion), 10)
	}
	if e.Headers != nil {
		ev.Headers = []byte(*e.Headers)
	}
	switch {
	case e.AggregateVersion == nil:
		ev.Invalid = `column "aggregate_version" is NULL`
	case e.SchemaVersion == nil:
		ev.Invalid = `column "schema_version" is NULL`
	case e.EventType == "":
		ev.Invalid = `column "event_type" is empty`
	case e.Payload == nil:
		ev.Invalid = replication.InvalidNullPayload
	}
	return ev
}
