package main

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
)

// TestBatchHandlersOnPostgres runs the set-based handlers of modes 3 and 6
// against PostgreSQL (skipped without the stack): the projection's
// BatchHandler must end where one-at-a-time application ends, with several
// versions of one aggregate in a batch, and fail where it fails.
func TestBatchHandlersOnPostgres(t *testing.T) {
	pool := testenv.Pool(t)
	schema := testenv.Schema(t, pool, "inbox_bench_test")
	ctx := context.Background()
	for _, m := range []mode{*modeByNumber(3), *modeByNumber(6)} {
		if _, err := pool.Exec(ctx, m.setupSQL(schema)); err != nil {
			t.Fatal(err)
		}
	}
	ev := func(agg string, v int64) *record.Event {
		return &record.Event{ID: eventID(int(v)*1000 + len(agg)), AggregateID: agg, AggregateVersion: v, EventType: "t", Payload: []byte(`{"v":1}`)}
	}
	apply := func(h inbox.BatchHandler, evs ...*record.Event) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if err := h(ctx, tx, evs); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	state := func() map[string]int64 {
		rows, _ := pool.Query(ctx, `SELECT id, version FROM `+modeByNumber(6).table(schema))
		out := map[string]int64{}
		var id string
		var v int64
		if _, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error { out[id] = v; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := func(step string, w map[string]int64) {
		t.Helper()
		got := state()
		if len(got) != len(w) {
			t.Fatalf("%s: state %v, want %v", step, got, w)
		}
		for k, v := range w {
			if got[k] != v {
				t.Fatalf("%s: state %v, want %v", step, got, w)
			}
		}
	}

	_, h6 := modeByNumber(6).handlers(schema)
	if err := apply(h6, ev("a", 1), ev("bb", 1), ev("a", 2), ev("a", 3), ev("ccc", 1), ev("bb", 2)); err != nil {
		t.Fatal(err)
	}
	want("versions 1-3 in one batch", map[string]int64{"a": 3, "bb": 2, "ccc": 1})
	if err := apply(h6, ev("a", 4), ev("bb", 3), ev("a", 5), ev("dddd", 1)); err != nil {
		t.Fatal(err)
	}
	want("runs moving on", map[string]int64{"a": 5, "bb": 3, "ccc": 1, "dddd": 1})
	for _, bad := range []struct {
		name string
		evs  []*record.Event
	}{
		{"a gap inside the batch", []*record.Event{ev("ccc", 2), ev("ccc", 4)}},
		{"a gap after the stored version", []*record.Event{ev("a", 7)}},
		{"a gap after the stored version, with a run", []*record.Event{ev("a", 6), ev("bb", 5), ev("bb", 6)}},
		{"version 1 again", []*record.Event{ev("dddd", 2), ev("bb", 1)}},
		{"an old version", []*record.Event{ev("a", 5)}},
	} {
		err := apply(h6, bad.evs...)
		if !errors.Is(err, inbox.ErrExpectation) || !poison.IsPermanent(err) {
			t.Fatalf("%s: error %v, want a permanent ErrExpectation", bad.name, err)
		}
		want(bad.name+" (rolled back)", map[string]int64{"a": 5, "bb": 3, "ccc": 1, "dddd": 1})
	}

	_, h3 := modeByNumber(3).handlers(schema)
	if err := apply(h3, ev("a", 1), ev("bb", 1), ev("a", 2)); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+modeByNumber(3).table(schema)+` WHERE payload = '{"v": 1}'::jsonb`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("effect rows %d, %v", n, err)
	}
}
