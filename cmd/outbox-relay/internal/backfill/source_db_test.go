package backfill

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Without commit timestamps every aggregate's events come out by
// aggregate_version, whatever order they were inserted in.
func TestDBScanOrderAndContent(t *testing.T) {
	e := newDBEnv(t)
	type key struct {
		agg     string
		version int64
	}
	ids := map[key]string{}
	for _, k := range []key{{"B", 2}, {"A", 3}, {"A", 1}, {"B", 1}, {"A", 2}} {
		ids[k] = e.insert(t, e.pool, "order", k.agg, k.version, "created", nil)
	}
	inv := e.insert(t, e.pool, "invoice", "A", 1, "issued", `{"trace":"t1"}`)
	s := e.source("")
	s.Pos = 0x5000
	evs := e.scan(t, s, Selection{})
	if len(evs) != 6 {
		t.Fatalf("%d events", len(evs))
	}
	perAgg := map[string][]string{}
	for i, ev := range evs {
		if ev.TxLSN != 0x5000 || ev.Ordinal != i {
			t.Errorf("event %d at %v, want 0/5000 ordinal %d", i, ev.Pos(), i)
		}
		k := ev.AggregateType + "/" + ev.AggregateID
		perAgg[k] = append(perAgg[k], ev.AggregateVersion)
	}
	want := map[string][]string{"order/A": {"1", "2", "3"}, "order/B": {"1", "2"}, "invoice/A": {"1"}}
	if fmt.Sprint(perAgg) != fmt.Sprint(want) {
		t.Fatalf("versions per aggregate %v, want %v", perAgg, want)
	}
	i := slices.IndexFunc(evs, func(ev *replication.WALEvent) bool { return ev.EventID == inv })
	ev := evs[i]
	var created time.Time
	if err := e.pool.QueryRow(e.ctx, `SELECT created_at FROM `+e.tbl.Quoted()+` WHERE event_id = $1`, inv).Scan(&created); err != nil {
		t.Fatal(err)
	}
	if ev.EventType != "issued" || ev.SchemaVersion != "1" || string(ev.Payload) != `{"v": 1}` ||
		string(ev.Headers) != `{"trace": "t1"}` || !ev.CommitTime.Equal(created) || ev.Invalid != "" {
		t.Fatalf("event %+v (created_at %v)", ev, created)
	}
	if evs[slices.IndexFunc(evs, func(ev *replication.WALEvent) bool { return ev.EventID == ids[key{"A", 1}] })].Headers != nil {
		t.Fatal("NULL headers without a mark must stay nil")
	}
}

// The mark is added to the headers object (replacing a key of that name),
// makes one for NULL headers, and leaves headers that are not an object
// alone.
func TestDBMarkHeaders(t *testing.T) {
	e := newDBEnv(t)
	cases := []struct {
		headers any
		want    string
	}{
		{nil, `{"outbox_replay":"recover"}`},
		{`{"trace":"t1"}`, `{"trace":"t1","outbox_replay":"recover"}`},
		{`{"outbox_replay":"forged"}`, `{"outbox_replay":"recover"}`},
		{`[1,2]`, `[1,2]`},
		{`"text"`, `"text"`},
	}
	want := map[string]string{}
	for i, c := range cases {
		want[e.insert(t, e.pool, "order", "9", int64(i+1), "created", c.headers)] = c.want
	}
	for _, ev := range e.scan(t, e.source("recover"), Selection{}) {
		if !jsonEqual(t, ev.Headers, want[ev.EventID]) {
			t.Errorf("headers %s, want %s", ev.Headers, want[ev.EventID])
		}
	}
}

func jsonEqual(t *testing.T, a []byte, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// A hand-made table: bytea payload, no headers or created_at, nullable
// columns. Payloads come out as raw bytes, NULLs make invalid events (the
// publisher dead-letters them) and the mark is the only header.
func TestDBHandMadeTable(t *testing.T) {
	e := newEmptyDBEnv(t)
	e.exec(t, `CREATE SCHEMA `+pgx.Identifier{e.tbl.Schema}.Sanitize())
	e.exec(t, `CREATE TABLE `+e.tbl.Quoted()+` (event_id uuid PRIMARY KEY, aggregate_type text, aggregate_id text,
		aggregate_version bigint, event_type text, schema_version int, payload bytea, tenant text)`)
	e.migrate(t)
	if e.schema != (migrations.Schema{PayloadType: "bytea"}) {
		t.Fatalf("schema %+v", e.schema)
	}
	e.exec(t, `INSERT INTO `+e.tbl.Quoted()+` VALUES
		('00000000-0000-0000-0000-000000000002', 'order', '9', 2, 'created', 1, '\xff00fe', 'x'),
		('00000000-0000-0000-0000-000000000001', 'order', '9', 1, 'created', 1, NULL, 'x'),
		('00000000-0000-0000-0000-000000000003', 'order', '9', NULL, NULL, 1, '\x00', 'x')`)
	before := time.Now()
	evs := e.scan(t, e.source("recover"), Selection{})
	if got := eventIDs(evs); !slices.Equal(got, []string{
		"00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002", "00000000-0000-0000-0000-000000000003"}) {
		t.Fatalf("order %v", got)
	}
	if evs[0].Invalid != `column "payload" is NULL` {
		t.Errorf("NULL payload: %+v", evs[0])
	}
	if string(evs[1].Payload) != "\xff\x00\xfe" || evs[1].Invalid != "" || !jsonEqual(t, evs[1].Headers, `{"outbox_replay":"recover"}`) ||
		evs[1].CommitTime.Before(before.Add(-time.Second)) {
		t.Errorf("bytea row: %+v", evs[1])
	}
	if evs[2].Invalid != `column "aggregate_version" is NULL` {
		t.Errorf("NULL version and type: %+v", evs[2])
	}
}

func TestDBWindowFilters(t *testing.T) {
	e := newDBEnv(t)
	a1 := e.insert(t, e.pool, "order", "A", 1, "created", nil)
	a2 := e.insert(t, e.pool, "order", "A", 2, "paid", nil)
	b1 := e.insert(t, e.pool, "order", "B", 1, "created", nil)
	i1 := e.insert(t, e.pool, "invoice", "A", 1, "created", nil)
	cases := []struct {
		w    Selection
		want []string
	}{
		{Selection{}, []string{i1, a1, a2, b1}},
		{Selection{AggregateID: "A"}, []string{i1, a1, a2}},
		{Selection{AggregateID: "A", AggregateType: "order"}, []string{a1, a2}},
		{Selection{EventType: "created"}, []string{i1, a1, b1}},
		{Selection{AggregateType: "order", EventType: "paid"}, []string{a2}},
		{Selection{AggregateID: "C"}, nil},
	}
	for _, c := range cases {
		got := eventIDs(e.scan(t, e.source(""), c.w))
		if !slices.Equal(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
			t.Errorf("%+v: %v, want %v", c.w, got, c.want)
		}
	}
}

// Events with an open dead-letter row are left out (the dlq commands own
// them); with SkipQuarantined their whole aggregate is. Resolved rows and
// rows of another outbox table do not count.
func TestDBDeadLetteredRows(t *testing.T) {
	e := newDBEnv(t)
	a1 := e.insert(t, e.pool, "order", "A", 1, "created", nil)
	a2 := e.insert(t, e.pool, "order", "A", 2, "created", nil)
	b1 := e.insert(t, e.pool, "order", "B", 1, "created", nil)
	b2 := e.insert(t, e.pool, "order", "B", 2, "created", nil)
	dl := func(outbox, id, agg, status string) {
		e.exec(t, `INSERT INTO `+migrations.DeadLetterTable(e.tbl).Quoted()+` (outbox_table, event_id, aggregate_type,
			aggregate_id, tx_lsn, tx_ordinal, status, reason, class) VALUES ($1, $2, 'order', $3, '0/1', 0, $4, 'r', 'c')`,
			outbox, id, agg, status)
	}
	dl(e.tbl.String(), a1, "A", "dead")
	dl(e.tbl.String(), b1, "B", "published")
	dl(e.tbl.Schema+".other_outbox", b2, "B", "parked")

	if got := eventIDs(e.scan(t, e.source(""), Selection{})); !slices.Equal(got, []string{a2, b1, b2}) {
		t.Errorf("per event: %v, want %v", got, []string{a2, b1, b2})
	}
	if got := eventIDs(e.scan(t, e.source(""), Selection{SkipQuarantined: true})); !slices.Equal(got, []string{b1, b2}) {
		t.Errorf("SkipQuarantined: %v, want %v", got, []string{b1, b2})
	}
	if n, err := e.source("").Quarantined(e.ctx, e.pool); err != nil || n != 1 {
		t.Errorf("Quarantined = %d, %v; want 1", n, err)
	}
}

// The fence arithmetic: rows with xid >= Fence.Xmin hold every row
// committed after the fence, including one whose transaction began (and
// took its xid) before the fence but committed after it; rows with xid <
// Fence.Xmax hold every row committed before it, and none whose
// transaction began after it. (Whether the straddling transaction's row is
// below Xmax is not promised: Xmax is one past the newest completed xid.)
func TestDBFenceWindow(t *testing.T) {
	e := newDBEnv(t)
	before := e.insert(t, e.pool, "order", "A", 1, "created", nil)
	long, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(context.Background())
	straddling := e.insert(t, long, "order", "B", 1, "created", nil)
	mid := e.insert(t, e.pool, "order", "C", 1, "created", nil)
	f, err := checkpoint.CaptureFence(e.ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	if f.Xmin > f.Xmax || f.LSN == 0 {
		t.Fatalf("fence %+v", f)
	}
	if err := long.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	after := e.insert(t, e.pool, "order", "D", 1, "created", nil)

	s := e.source("")
	from := e.scan(t, s, Selection{FromXid: &f.Xmin})
	if !has(from, straddling, mid, after) {
		t.Errorf("xid >= fence Xmin %d: %v misses a row committed after the fence (%s, %s)", f.Xmin, eventIDs(from), straddling, after)
	}
	to := e.scan(t, s, Selection{ToXid: &f.Xmax})
	if !has(to, before, mid) || has(to, after) {
		t.Errorf("xid < fence Xmax %d: %v; want %s %s and not %s", f.Xmax, eventIDs(to), before, mid, after)
	}
	// mid's xid is above the straddling transaction's (>= Xmin) and
	// completed before the fence (< Xmax).
	both := e.scan(t, s, Selection{FromXid: &f.Xmin, ToXid: &f.Xmax})
	if !has(both, mid) || has(both, after) {
		t.Errorf("between the bounds: %v", eventIDs(both))
	}
	// Fence xids carry the epoch (pg_snapshot_xmin is an xid8): the
	// comparison is on the 32-bit xid, so an epoch changes nothing.
	epoch := f.Xmin + 3<<32
	if got := eventIDs(e.scan(t, s, Selection{FromXid: &epoch})); !slices.Equal(got, eventIDs(from)) {
		t.Errorf("with epoch 3: %v, want %v", got, eventIDs(from))
	}
	// A fence taken later leaves out what committed before it, unless a
	// transaction older than that row (another test's) was still running.
	f2, err := checkpoint.CaptureFence(e.ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	last := e.insert(t, e.pool, "order", "E", 1, "created", nil)
	got := e.scan(t, s, Selection{FromXid: &f2.Xmin})
	if !has(got, last) {
		t.Errorf("window from a later fence misses the row committed after it: %v", eventIDs(got))
	}
	if f2.Xmin >= f.Xmax && has(got, before) {
		t.Errorf("window from a later fence (xmin %d) holds a row whose xid is below %d: %v", f2.Xmin, f.Xmax, eventIDs(got))
	}
}

func TestDBCommitTimestamps(t *testing.T) {
	e := newDBEnv(t)
	var setting string
	if err := e.pool.QueryRow(e.ctx, `SHOW track_commit_timestamp`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	on, err := CommitTimestamps(e.ctx, e.pool)
	if err != nil || on != (setting == "on") {
		t.Fatalf("CommitTimestamps = %v, %v; track_commit_timestamp is %s", on, err, setting)
	}
	if !on {
		t.Skip("track_commit_timestamp is off on this server: the commit-timestamp order and --since are not exercised")
	}
	// Commit order, not version order, and Since/Until by commit time.
	v2 := e.insert(t, e.pool, "order", "A", 2, "created", nil)
	// wall-clock: mid must fall strictly between the two commit timestamps the real server records.
	time.Sleep(10 * time.Millisecond)
	mid := time.Now()
	// wall-clock: as above.
	time.Sleep(10 * time.Millisecond)
	v1 := e.insert(t, e.pool, "order", "A", 1, "created", nil)
	s := e.source("")
	s.CommitTS = true
	if got := eventIDs(e.scan(t, s, Selection{})); !slices.Equal(got, []string{v2, v1}) {
		t.Errorf("commit order: %v, want %v", got, []string{v2, v1})
	}
	if got := eventIDs(e.scan(t, s, Selection{Since: mid})); !slices.Equal(got, []string{v1}) {
		t.Errorf("since: %v", got)
	}
	if got := eventIDs(e.scan(t, s, Selection{Until: mid})); !slices.Equal(got, []string{v2}) {
		t.Errorf("until: %v", got)
	}
}

// A run reads one snapshot and hands every event to the publisher.
func TestDBRunner(t *testing.T) {
	e := newDBEnv(t)
	var want []string
	for v := int64(1); v <= 5; v++ {
		want = append(want, e.insert(t, e.pool, "order", "A", v, "created", nil))
	}
	tx, err := e.pool.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	s := e.source("replay")
	total, err := s.Count(e.ctx, tx, Selection{})
	if err != nil {
		t.Fatal(err)
	}
	e.insert(t, e.pool, "order", "A", 6, "created", nil) // after the snapshot
	pub := newFakePub()
	defer pub.close()
	st, err := (&Runner{Source: s, Pub: pub, Window: 2}).Run(e.ctx, tx, Selection{}, total)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pub.ids(), want) || st.Acked != 5 || st.Total != 5 {
		t.Fatalf("published %v (stats %+v), want %v", pub.ids(), st, want)
	}
	for _, ev := range pub.got {
		if !jsonEqual(t, ev.Headers, `{"outbox_replay":"replay"}`) {
			t.Fatalf("headers %s", ev.Headers)
		}
	}
}
