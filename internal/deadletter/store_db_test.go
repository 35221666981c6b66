package deadletter

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

func TestDBCheck(t *testing.T) {
	e := newEmptyDBEnv(t)
	err := e.store.Check(e.ctx)
	if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("Check before migrating = %v", err)
	}
	if _, err := migrations.Apply(e.ctx, e.pool, e.tbl, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Check(e.ctx); err != nil {
		t.Fatalf("Check after migrating = %v", err)
	}
	// A table migrated by an older release, before migration 5.
	e.exec(t, `ALTER TABLE `+e.dlTable()+` DROP COLUMN system_identifier`)
	if err := e.store.Check(e.ctx); err == nil || !strings.Contains(err.Error(), "system_identifier") {
		t.Fatalf("Check without system_identifier = %v", err)
	}
}

// Poison keeps the whole event: a retry must publish exactly what the
// relay could not.
func TestDBPoisonKeepsTheEvent(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	dead := 0
	q.OnDead = func() { dead++ }
	ev := event("e-1", "order", "9", 0x16B3748, 4)
	ev.Payload = []byte{0xff, 0x00, 0xfe} // not UTF-8: stored as raw bytes
	before := time.Now().Add(-time.Minute)
	if err := q.Poison(e.ctx, ev, "orders.v1", "too_large", "message too large (1 MB)"); err != nil {
		t.Fatal(err)
	}
	if dead != 1 {
		t.Fatalf("OnDead called %d times", dead)
	}
	got, err := e.store.Get(e.ctx, "e-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.EventID != "e-1" || got.Aggregate != (Aggregate{"order", "9"}) || got.EventType != "created" ||
		got.AggregateVersion == nil || *got.AggregateVersion != 7 || got.SchemaVersion == nil || *got.SchemaVersion != 2 ||
		string(got.Payload) != string(ev.Payload) || got.Headers == nil || *got.Headers != string(ev.Headers) ||
		got.Topic != "orders.v1" || got.Pos != ev.Pos() || !got.CommitTime.Equal(ev.CommitTime) ||
		got.Status != StatusDead || got.Class != "too_large" || got.Reason != "message too large (1 MB)" ||
		got.Attempts != 1 || got.FirstFailedAt.Before(before) || got.ResolvedAt != nil || got.Resolution != nil {
		t.Fatalf("Get = %+v", got)
	}
	// What a retry would publish is the event the relay decoded.
	re := got.event()
	if re.EventID != ev.EventID || re.AggregateVersion != ev.AggregateVersion || re.SchemaVersion != ev.SchemaVersion ||
		string(re.Payload) != string(ev.Payload) || string(re.Headers) != string(ev.Headers) || re.Pos() != ev.Pos() || re.Invalid != "" {
		t.Fatalf("event() = %+v, want %+v", re, ev)
	}
}

// An event that could not become a record (NULL columns, no id) is
// dead-lettered as it is, and rebuilt as invalid.
func TestDBPoisonInvalidEvent(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	ev := &replication.WALEvent{
		Row:     record.Row{AggregateType: "order", AggregateID: "9", Invalid: `column "aggregate_version" is NULL`},
		TxLSN:   0x2000,
		Ordinal: 1,
	}
	if err := q.Poison(e.ctx, ev, "", "invalid", ev.Invalid); err != nil {
		t.Fatal(err)
	}
	got, err := e.store.Get(e.ctx, "position:0/2000:1")
	if err != nil {
		t.Fatal(err)
	}
	if got.AggregateVersion != nil || got.SchemaVersion != nil || got.Payload != nil || got.Headers != nil ||
		got.EventType != "" || got.Topic != "" {
		t.Fatalf("NULL columns came back as %+v", got)
	}
	if got.event().Invalid == "" {
		t.Fatal("an entry without a version rebuilt as a valid event")
	}
}

func TestDBGetNotFound(t *testing.T) {
	e := newDBEnv(t)
	if _, err := e.store.Get(e.ctx, "nope"); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("Get = %v, want ErrEntryNotFound", err)
	}
}

// List shows open rows in commit order (transaction, then ordinal), not
// in the order they were written, and filters as asked.
func TestDBListOrderAndFilters(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	// Written out of commit order: a poison event of an earlier
	// transaction can arrive after another aggregate's (the lanes).
	mustPoison(t, q, event("b-dead", "order", "B", 0x300, 0))
	mustPoison(t, q, event("a-dead", "order", "A", 0x200, 5))
	if !hold(t, q, event("b-park2", "order", "B", 0x400, 1)) || !hold(t, q, event("a-park", "order", "A", 0x400, 0)) ||
		!hold(t, q, event("b-park1", "order", "B", 0x300, 7)) {
		t.Fatal("a later event of a quarantined aggregate was not parked")
	}
	mustPoison(t, q, event("c-dead", "invoice", "A", 0x200, 1))
	e.exec(t, `UPDATE `+e.dlTable()+` SET status = 'discarded' WHERE event_id = 'c-dead'`)

	list := func(f Filter) []string {
		t.Helper()
		entries, err := e.store.List(e.ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return ids(entries)
	}
	cases := []struct {
		f    Filter
		want []string
	}{
		{Filter{}, []string{"a-dead", "b-dead", "b-park1", "a-park", "b-park2"}},
		{Filter{All: true}, []string{"c-dead", "a-dead", "b-dead", "b-park1", "a-park", "b-park2"}},
		{Filter{AggregateID: "B"}, []string{"b-dead", "b-park1", "b-park2"}},
		{Filter{AggregateID: "A", All: true}, []string{"c-dead", "a-dead", "a-park"}},
		{Filter{AggregateID: "A", AggregateType: "invoice", All: true}, []string{"c-dead"}},
		{Filter{AggregateType: "order", Limit: 2}, []string{"a-dead", "b-dead"}},
		{Filter{AggregateID: "Z"}, []string{}},
	}
	for _, c := range cases {
		if got := list(c.f); !slices.Equal(got, c.want) {
			t.Errorf("List(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
	for id, want := range map[string]string{"a-dead": StatusDead, "a-park": StatusParked, "c-dead": StatusDiscarded} {
		if got := e.status(t, id); got != want {
			t.Errorf("%s is %q, want %q", id, got, want)
		}
	}
}

// The default limit is 1000, so a large quarantine does not flood the
// terminal; a larger explicit limit lists more.
func TestDBListDefaultLimit(t *testing.T) {
	e := newDBEnv(t)
	e.exec(t, `INSERT INTO `+e.dlTable()+` (outbox_table, event_id, aggregate_type, aggregate_id, tx_lsn, tx_ordinal,
		status, reason, class) SELECT $1, 'e-' || i, 'order', '9', '0/100'::pg_lsn, i, 'parked', 'r', 'c'
		FROM generate_series(1, 1001) AS i`, e.tbl.String())
	entries, err := e.store.List(e.ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1000 || entries[0].EventID != "e-1" || entries[999].EventID != "e-1000" {
		t.Fatalf("List = %d entries, %s..%s", len(entries), entries[0].EventID, entries[len(entries)-1].EventID)
	}
	if entries, err := e.store.List(e.ctx, Filter{Limit: 5000}); err != nil || len(entries) != 1001 {
		t.Fatalf("List(Limit 5000) = %d entries, %v", len(entries), err)
	}
}

// Outbox tables of one schema share the dead-letter table: each store sees
// the rows of its own table only.
func TestDBStoresOfTwoOutboxTables(t *testing.T) {
	e := newDBEnv(t)
	other := migrations.Table{Schema: e.tbl.Schema, Name: "outbox_b"}
	if _, err := migrations.Apply(e.ctx, e.pool, other, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	sb := NewStore(e.pool, other)
	qa := e.quarantine(t, poison.Quarantine)
	qb, err := NewQueue(e.ctx, sb, poison.Quarantine, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	mustPoison(t, qa, event("same-id", "order", "9", 0x100, 0))
	mustPoison(t, qb, event("same-id", "order", "9", 0x900, 0)) // the same event id, in the other table
	mustPoison(t, qb, event("b-only", "order", "7", 0x900, 1))

	a, err := e.store.List(e.ctx, Filter{All: true})
	if err != nil || len(a) != 1 || a[0].Pos.TxLSN != 0x100 {
		t.Fatalf("store A lists %+v, %v", a, err)
	}
	if _, err := e.store.Get(e.ctx, "b-only"); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("store A gets B's row: %v", err)
	}
	if _, err := e.store.FindAggregate(e.ctx, "7", ""); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("store A finds B's aggregate: %v", err)
	}
	fresh, err := NewQueue(e.ctx, e.store, poison.Quarantine, testLogger(t))
	if err != nil || fresh.Quarantined() != 1 {
		t.Fatalf("quarantine of A reloads %d aggregates, %v; want 1", fresh.Quarantined(), err)
	}
	w := &recWriter{}
	if res, err := e.store.Retry(e.ctx, Aggregate{"order", "9"}, w, caughtUp); err != nil || !res.Lifted || len(w.got) != 1 || w.got[0].TxLSN != 0x100 {
		t.Fatalf("Retry in A = %+v, %v, published %v", res, err, w.got)
	}
	if got, err := sb.Get(e.ctx, "same-id"); err != nil || got.Status != StatusDead {
		t.Fatalf("a retry in A resolved B's row: %+v, %v", got, err)
	}
}

// A dead letter written by another PostgreSQL system (a dump restored into
// a new cluster, whose LSNs restart lower) is listed before the new
// cluster's rows, as the quarantine (open) and a retry (resolve) order it:
// ordered by LSN alone, `dlq list`, documented as "in commit order", would
// show the parked events before the poison event a retry publishes first.
func TestDBListForeignSystemRowFirst(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	mustPoison(t, q, event("old", "order", "9", 0x9000, 0))
	e.setSystem(t, "old", "another-system")
	if err := q.Reload(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	if !hold(t, q, event("new", "order", "9", 0x100, 0)) {
		t.Fatal("not parked")
	}
	entries, err := e.store.List(e.ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(entries); !slices.Equal(got, []string{"old", "new"}) {
		t.Fatalf("List = %v, want the foreign poison event first", got)
	}
}

// open reports, per aggregate, its earliest open row; a row of another
// system counts as 0/0, a row without a system identifier (written before
// migration 5) as this system's.
func TestDBOpenPositions(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	mustPoison(t, q, event("a1", "order", "A", 0x500, 2))
	mustPoison(t, q, event("a0", "order", "A", 0x500, 1))
	mustPoison(t, q, event("b", "order", "B", 0x700, 0))
	e.setSystem(t, "b", "another-system")
	mustPoison(t, q, event("c", "order", "C", 0x800, 3))
	e.setSystem(t, "c", nil)
	mustPoison(t, q, event("d", "order", "D", 0x100, 0))
	e.exec(t, `UPDATE `+e.dlTable()+` SET status = 'published' WHERE event_id = 'd'`)

	open, err := e.store.open(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[Aggregate]replication.Position{
		{"order", "A"}: {TxLSN: 0x500, Ordinal: 1},
		{"order", "B"}: {},
		{"order", "C"}: {TxLSN: 0x800, Ordinal: 3},
	}
	if fmt.Sprint(open) != fmt.Sprint(want) {
		t.Fatalf("open = %v, want %v", open, want)
	}
}

func TestDBFindAggregate(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	mustPoison(t, q, event("o", "order", "9", 0x100, 0))
	mustPoison(t, q, event("i", "invoice", "9", 0x100, 1))
	mustPoison(t, q, event("s", "shipment", "5", 0x100, 2))
	e.exec(t, `UPDATE `+e.dlTable()+` SET status = 'discarded' WHERE event_id = 's'`)

	if agg, err := e.store.FindAggregate(e.ctx, "9", "invoice"); err != nil || agg != (Aggregate{"invoice", "9"}) {
		t.Fatalf("FindAggregate(9, invoice) = %v, %v", agg, err)
	}
	_, err := e.store.FindAggregate(e.ctx, "9", "")
	if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "invoice") || !strings.Contains(err.Error(), "order") {
		t.Fatalf("FindAggregate(9) = %v, want ErrAmbiguous naming both types", err)
	}
	// Only open rows count: a resolved aggregate is not quarantined.
	if _, err := e.store.FindAggregate(e.ctx, "5", ""); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("FindAggregate(5) = %v, want ErrEntryNotFound", err)
	}
	if _, err := e.store.FindAggregate(e.ctx, "9", "shipment"); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("FindAggregate(9, shipment) = %v, want ErrEntryNotFound", err)
	}
	e.exec(t, `UPDATE `+e.dlTable()+` SET status = 'published' WHERE event_id = 'i'`)
	if agg, err := e.store.FindAggregate(e.ctx, "9", ""); err != nil || agg != (Aggregate{"order", "9"}) {
		t.Fatalf("FindAggregate(9) after the invoice was retried = %v, %v", agg, err)
	}
}
