package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/record"
)

// mode is one way of applying the same events.
type mode struct {
	Num        int
	Projection bool // the version-guarded projection; otherwise one INSERT per event
	Batched    bool // the consumer's batching defaults; otherwise BatchSize 1, Concurrency 1
	SetBased   bool // a BatchHandler; otherwise a Handler
	Baseline   int  // the mode the ratio is taken against: today's path of the same case
}

var modes = []mode{
	{Num: 1, Baseline: 1},
	{Num: 2, Batched: true, Baseline: 1},
	{Num: 3, Batched: true, SetBased: true, Baseline: 1},
	{Num: 4, Projection: true, Baseline: 4},
	{Num: 5, Projection: true, Batched: true, Baseline: 4},
	{Num: 6, Projection: true, Batched: true, SetBased: true, Baseline: 4},
}

func modeByNumber(n int) *mode {
	for i := range modes {
		if modes[i].Num == n {
			return &modes[i]
		}
	}
	return nil
}

// Case names the effect.
func (m mode) Case() string {
	if m.Projection {
		return "version-guarded UPDATE"
	}
	return "one INSERT"
}

// Path names how the consumer applies it.
func (m mode) Path() string {
	switch {
	case !m.Batched:
		return "one at a time (BatchSize 1, Concurrency 1)"
	case m.SetBased:
		return "BatchHandler, set-based"
	}
	return "batched Handler"
}

// table is the mode's effect table in schema.
func (m mode) table(schema string) string {
	name := "effects"
	if m.Projection {
		name = "state"
	}
	return pgx.Identifier{schema, name}.Sanitize()
}

// setupSQL creates the effect table (the inbox tables come from
// inbox.Migrate).
func (m mode) setupSQL(schema string) string {
	if m.Projection {
		return `CREATE TABLE ` + m.table(schema) + ` (id text PRIMARY KEY, version bigint NOT NULL)`
	}
	return `CREATE TABLE ` + m.table(schema) + ` (event_id uuid PRIMARY KEY, aggregate_id text NOT NULL,
		aggregate_version bigint NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL)`
}

// handlers returns the mode's Handler or BatchHandler.
func (m mode) handlers(schema string) (inbox.Handler, inbox.BatchHandler) {
	t := m.table(schema)
	switch {
	case !m.Projection && !m.SetBased:
		return insertHandler(t), nil
	case !m.Projection:
		return nil, insertBatch(t)
	case !m.SetBased:
		return func(ctx context.Context, tx pgx.Tx, ev *record.Event) error { return applyVersion(ctx, tx, t, ev) }, nil
	}
	return nil, projectionBatch(t)
}

// insertHandler writes one row per event.
func insertHandler(table string) inbox.Handler {
	sql := `INSERT INTO ` + table + ` (event_id, aggregate_id, aggregate_version, event_type, payload) VALUES ($1, $2, $3, $4, $5)`
	return func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
		_, err := tx.Exec(ctx, sql, ev.ID, ev.AggregateID, ev.AggregateVersion, ev.EventType, string(ev.Payload))
		return err
	}
}

// insertBatch writes the batch's rows with one statement.
func insertBatch(table string) inbox.BatchHandler {
	sql := `INSERT INTO ` + table + ` (event_id, aggregate_id, aggregate_version, event_type, payload)
		SELECT id::uuid, agg, v, typ, p::jsonb FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::text[]) AS u(id, agg, v, typ, p)`
	return func(ctx context.Context, tx pgx.Tx, evs []*record.Event) error {
		ids, aggs, types, payloads := make([]string, len(evs)), make([]string, len(evs)), make([]string, len(evs)), make([]string, len(evs))
		versions := make([]int64, len(evs))
		for i, ev := range evs {
			ids[i], aggs[i], versions[i], types[i], payloads[i] = ev.ID, ev.AggregateID, ev.AggregateVersion, ev.EventType, string(ev.Payload)
		}
		tag, err := tx.Exec(ctx, sql, ids, aggs, versions, types, payloads)
		if err != nil {
			return err
		}
		return inbox.ExpectRows(tag, int64(len(evs)))
	}
}

// applyVersion is the seed's projection for one event: version 1 creates
// the aggregate's row, every later version moves it on by exactly one.
// ExpectRows turns a gap or a reordering into a permanent failure.
func applyVersion(ctx context.Context, tx pgx.Tx, table string, ev *record.Event) error {
	if ev.AggregateVersion == 1 {
		tag, err := tx.Exec(ctx, `INSERT INTO `+table+` (id, version) VALUES ($1, 1) ON CONFLICT DO NOTHING`, ev.AggregateID)
		if err != nil {
			return err
		}
		return inbox.ExpectRows(tag, 1)
	}
	tag, err := tx.Exec(ctx, `UPDATE `+table+` SET version = $2 WHERE id = $1 AND version = $2 - 1`, ev.AggregateID, ev.AggregateVersion)
	if err != nil {
		return err
	}
	return inbox.ExpectRows(tag, 1)
}

// projectionPlan is a batch of the projection, regrouped per aggregate for
// set-based statements.
type projectionPlan struct {
	// Aggregates whose versions in the batch run 1, 2, …, last: inserted
	// at their last version.
	InsertIDs      []string
	InsertVersions []int64
	// Aggregates whose versions run first, first+1, …, last with first > 1:
	// moved from first-1 to last by one UPDATE row each.
	UpdateIDs               []string
	UpdateFirst, UpdateLast []int64
	// Events of aggregates whose versions in the batch are not contiguous
	// (a gap, a repeat, a step back): applied one by one, in batch order.
	Single []*record.Event
}

// planProjection groups evs (record order) per aggregate.
//
// Applying the events one at a time would run, per aggregate, "version =
// v WHERE version = v-1" for each v in turn. When an aggregate's versions
// in the batch are contiguous, first … last, that sequence succeeds if and
// only if the stored version is first-1 (or there is no row and first is
// 1), and it ends at last: so one row per aggregate, guarded by first-1,
// has the same outcome, and its RowsAffected count must equal the number
// of aggregates (UPDATE … FROM with one source row per target row; several
// source rows for one target would update it once, with any of them, and
// hide a gap). When the versions are not contiguous, the one-at-a-time
// sequence fails somewhere in the middle; those events keep their
// per-event statements, so the failure shows at the exact event when the
// consumer splits the batch.
func planProjection(evs []*record.Event) projectionPlan {
	type run struct {
		first, last int64
		contiguous  bool
		evs         []*record.Event
	}
	runs := map[string]*run{}
	var order []string
	for _, ev := range evs {
		r := runs[ev.AggregateID]
		if r == nil {
			r = &run{first: ev.AggregateVersion, last: ev.AggregateVersion, contiguous: true}
			runs[ev.AggregateID] = r
			order = append(order, ev.AggregateID)
		} else if ev.AggregateVersion == r.last+1 {
			r.last = ev.AggregateVersion
		} else {
			r.contiguous = false
		}
		r.evs = append(r.evs, ev)
	}
	var p projectionPlan
	for _, id := range order {
		r := runs[id]
		switch {
		case !r.contiguous || r.first < 1:
			p.Single = append(p.Single, r.evs...)
		case r.first == 1:
			p.InsertIDs = append(p.InsertIDs, id)
			p.InsertVersions = append(p.InsertVersions, r.last)
		default:
			p.UpdateIDs = append(p.UpdateIDs, id)
			p.UpdateFirst = append(p.UpdateFirst, r.first)
			p.UpdateLast = append(p.UpdateLast, r.last)
		}
	}
	return p
}

// projectionBatch applies a batch of the projection with one INSERT and
// one UPDATE … FROM unnest(…) (see planProjection), checked like the
// per-event handler: a count below the number of aggregates is a gap or a
// reordering somewhere in the batch, a permanent error; the consumer then
// re-applies the batch in halves until the failing event is alone.
func projectionBatch(table string) inbox.BatchHandler {
	insert := `INSERT INTO ` + table + ` (id, version) SELECT * FROM unnest($1::text[], $2::int8[]) ON CONFLICT DO NOTHING`
	update := `UPDATE ` + table + ` AS s SET version = u.last
		FROM unnest($1::text[], $2::int8[], $3::int8[]) AS u(id, first, last)
		WHERE s.id = u.id AND s.version = u.first - 1`
	return func(ctx context.Context, tx pgx.Tx, evs []*record.Event) error {
		p := planProjection(evs)
		if len(p.InsertIDs) > 0 {
			tag, err := tx.Exec(ctx, insert, p.InsertIDs, p.InsertVersions)
			if err != nil {
				return err
			}
			if err := inbox.ExpectRows(tag, int64(len(p.InsertIDs))); err != nil {
				return fmt.Errorf("%d aggregates starting at version 1: %w", len(p.InsertIDs), err)
			}
		}
		if len(p.UpdateIDs) > 0 {
			tag, err := tx.Exec(ctx, update, p.UpdateIDs, p.UpdateFirst, p.UpdateLast)
			if err != nil {
				return err
			}
			if err := inbox.ExpectRows(tag, int64(len(p.UpdateIDs))); err != nil {
				return fmt.Errorf("%d aggregates moved on by version runs: %w", len(p.UpdateIDs), err)
			}
		}
		for _, ev := range p.Single {
			if err := applyVersion(ctx, tx, table, ev); err != nil {
				return fmt.Errorf("aggregate %s version %s: %w", ev.AggregateID, strconv.FormatInt(ev.AggregateVersion, 10), err)
			}
		}
		return nil
	}
}
