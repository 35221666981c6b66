package backfill

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
)

var testTable = migrations.Table{Schema: "app", Name: "outbox"}

var fullSchema = migrations.Schema{PayloadType: "jsonb", HasHeaders: true, HasCreatedAt: true}

func u64(v uint64) *uint64 { return &v }

// checkPlaceholders fails unless the statement uses exactly $1..$len(args).
func checkPlaceholders(t *testing.T, sql string, args []any) {
	t.Helper()
	seen := map[int]bool{}
	for _, m := range regexp.MustCompile(`\$(\d+)`).FindAllStringSubmatch(sql, -1) {
		n, _ := strconv.Atoi(m[1])
		seen[n] = true
	}
	for n := range seen {
		if n < 1 || n > len(args) {
			t.Errorf("placeholder $%d with %d arguments:\n%s", n, len(args), sql)
		}
	}
	for n := 1; n <= len(args); n++ {
		if !seen[n] {
			t.Errorf("argument $%d (%v) is not used:\n%s", n, args[n-1], sql)
		}
	}
}

// Every combination of window fields numbers its arguments consistently,
// and each argument carries the value of its field.
func TestSelectArguments(t *testing.T) {
	since := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	until := since.Add(time.Hour)
	full := Selection{FromXid: u64(100), ToXid: u64(200), Since: since, Until: until,
		AggregateType: "order", AggregateID: "9", EventType: "created"}
	for _, commitTS := range []bool{false, true} {
		for _, mark := range []string{"", "replay"} {
			for _, w := range []Selection{{}, full, {ToXid: u64(5), EventType: "x", SkipQuarantined: true}, {Since: since}} {
				s := &Source{Table: testTable, Schema: fullSchema, CommitTS: commitTS, Mark: mark}
				name := fmt.Sprintf("commitTS=%v mark=%q %+v", commitTS, mark, w)
				sql, args := s.selectSQL(w)
				checkPlaceholders(t, sql, args)
				if args[0] != "app.outbox" {
					t.Errorf("%s: $1 = %v, want the outbox table's name", name, args[0])
				}
				if mark != "" && args[len(args)-1] != mark {
					t.Errorf("%s: last argument %v, want the mark", name, args[len(args)-1])
				}
				where, wargs := s.where(w)
				checkPlaceholders(t, "SELECT "+where, wargs)
				// Times bound rows only through commit timestamps.
				hasTime := slices.ContainsFunc(wargs, func(a any) bool { _, ok := a.(time.Time); return ok })
				if hasTime != (commitTS && !w.Since.IsZero()) {
					t.Errorf("%s: time arguments %v", name, wargs)
				}
			}
		}
	}
	s := &Source{Table: testTable, Schema: fullSchema, CommitTS: true}
	_, args := s.where(full)
	want := []any{"app.outbox", int64(100), int64(200), since, until, "order", "9", "created"}
	if fmt.Sprint(args) != fmt.Sprint(want) {
		t.Fatalf("where args = %v, want %v", args, want)
	}
}

// A fence xid is a 64-bit xid (epoch and all); the table's xmin is 32-bit.
// Both go through age() so they count back from the same reference, and the
// epoch is cut off before the cast.
func TestXidCond(t *testing.T) {
	got := xidCond("<=", "$2")
	want := "age(o.xmin) <= age(($2::bigint % 4294967296)::text::xid)"
	if got != want {
		t.Fatalf("xidCond = %q, want %q", got, want)
	}
}

func TestDeadLetterCondition(t *testing.T) {
	s := &Source{Table: testTable, Schema: fullSchema}
	per, _ := s.where(Selection{})
	agg, _ := s.where(Selection{SkipQuarantined: true})
	dl := `"app"."outbox_dead_letter"`
	if !strings.Contains(per, dl) || !strings.Contains(per, "d.event_id = o.event_id::text") || strings.Contains(per, "d.aggregate_id") {
		t.Errorf("without SkipQuarantined only the dead-lettered events are left out:\n%s", per)
	}
	if !strings.Contains(agg, dl) || !strings.Contains(agg, "d.aggregate_id = o.aggregate_id") || strings.Contains(agg, "d.event_id") {
		t.Errorf("SkipQuarantined leaves out whole aggregates:\n%s", agg)
	}
	for _, w := range []string{per, agg} {
		if !strings.Contains(w, "d.outbox_table = $1") || !strings.Contains(w, "('dead', 'parked')") {
			t.Errorf("only this table's open rows count:\n%s", w)
		}
	}
}

// The publishing order is per aggregate by version without commit
// timestamps, by commit timestamp with them.
func TestSelectOrder(t *testing.T) {
	order := func(s *Source) string {
		sql, _ := s.selectSQL(Selection{})
		_, o, ok := strings.Cut(sql, "ORDER BY ")
		if !ok {
			t.Fatalf("no ORDER BY:\n%s", sql)
		}
		return strings.TrimSpace(o)
	}
	cases := []struct {
		s    Source
		want string
	}{
		{Source{Schema: fullSchema}, "o.aggregate_type, o.aggregate_id, o.aggregate_version, o.created_at, o.event_id"},
		{Source{Schema: migrations.Schema{PayloadType: "bytea"}}, "o.aggregate_type, o.aggregate_id, o.aggregate_version, o.event_id"},
		{Source{Schema: fullSchema, CommitTS: true}, "pg_xact_commit_timestamp(o.xmin) NULLS FIRST, o.aggregate_version, o.event_id"},
	}
	for _, c := range cases {
		c.s.Table = testTable
		if got := order(&c.s); got != c.want {
			t.Errorf("%+v: ORDER BY %s, want %s", c.s.Schema, got, c.want)
		}
	}
}

// Scan builds events in order, numbering them from Source.Pos so that a
// parked one sorts among the dead-letter rows; a NULL in a required column
// makes the event invalid (the first such column is named) instead of
// failing the run.
func TestScanRows(t *testing.T) {
	nullVersion := outboxRow("e3", "order", "9", "")
	nullVersion[3], nullVersion[5] = nil, nil
	nullPayload := outboxRow("e4", "order", "9", "4")
	nullPayload[6], nullPayload[7], nullPayload[8] = nil, nil, nil
	db := &fakeDB{rows: [][]any{outboxRow("e1", "order", "9", "1"), outboxRow("e2", "order", "9", "2"), nullVersion, nullPayload}}
	s := &Source{Table: testTable, Schema: fullSchema, Pos: 0xABC}
	var got []*replication.WALEvent
	before := time.Now()
	if err := s.Scan(context.Background(), db, Selection{}, func(ev *replication.WALEvent) error {
		got = append(got, ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d events", len(got))
	}
	for i, ev := range got {
		if ev.TxLSN != 0xABC || ev.Ordinal != i {
			t.Errorf("event %d at %v", i, ev.Pos())
		}
	}
	e1 := got[0]
	if e1.EventID != "e1" || e1.AggregateType != "order" || e1.AggregateID != "9" || e1.AggregateVersion != "1" ||
		e1.EventType != "created" || e1.SchemaVersion != "1" || string(e1.Payload) != `{"id":"e1"}` ||
		string(e1.Headers) != `{"outbox_replay":"replay"}` || !e1.CommitTime.Equal(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)) || e1.Invalid != "" {
		t.Fatalf("event = %+v", e1)
	}
	if got[2].Invalid != `column "aggregate_version" is NULL` || got[2].EventID != "e3" {
		t.Errorf("NULL version: %+v", got[2])
	}
	e4 := got[3]
	if e4.Invalid != `column "payload" is NULL` || e4.Headers != nil || e4.CommitTime.Before(before) {
		t.Errorf("NULL payload, headers, commit time: %+v", e4)
	}
}

func TestScanErrors(t *testing.T) {
	ctx := context.Background()
	s := &Source{Table: testTable, Schema: fullSchema}
	boom := errors.New("boom")
	if err := s.Scan(ctx, &fakeDB{err: boom}, Selection{}, nil); !errors.Is(err, boom) || !strings.Contains(err.Error(), "app.outbox") {
		t.Errorf("query error: %v", err)
	}
	rows := [][]any{outboxRow("e1", "order", "9", "1"), outboxRow("e2", "order", "9", "2")}
	if err := s.Scan(ctx, &fakeDB{rows: rows, rowsErr: boom}, Selection{}, func(*replication.WALEvent) error { return nil }); !errors.Is(err, boom) {
		t.Errorf("rows error: %v", err)
	}
	// The callback's error stops the scan and is returned as it is.
	stop := errors.New("stop")
	n := 0
	err := s.Scan(ctx, &fakeDB{rows: rows}, Selection{}, func(*replication.WALEvent) error { n++; return stop })
	if err != stop || n != 1 {
		t.Errorf("callback error: %v after %d events", err, n)
	}
	bad := [][]any{{strp("only one column")}}
	if err := s.Scan(ctx, &fakeDB{rows: bad}, Selection{}, func(*replication.WALEvent) error { return nil }); err == nil {
		t.Error("a scan error was ignored")
	}
}

func TestCountAndQuarantinedErrors(t *testing.T) {
	ctx := context.Background()
	s := &Source{Table: testTable, Schema: fullSchema}
	boom := errors.New("boom")
	if _, err := s.Count(ctx, &fakeDB{err: boom}, Selection{}); !errors.Is(err, boom) {
		t.Errorf("Count: %v", err)
	}
	if _, err := s.Quarantined(ctx, &fakeDB{err: boom}); !errors.Is(err, boom) {
		t.Errorf("Quarantined: %v", err)
	}
	if _, err := CommitTimestamps(ctx, &fakeDB{err: boom}); !errors.Is(err, boom) {
		t.Errorf("CommitTimestamps: %v", err)
	}
	for v, want := range map[string]bool{"on": true, "off": false} {
		if got, err := CommitTimestamps(ctx, &fakeDB{rowValue: []any{v}}); err != nil || got != want {
			t.Errorf("track_commit_timestamp %s: %v, %v", v, got, err)
		}
	}
}
