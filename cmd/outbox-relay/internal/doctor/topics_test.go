package doctor

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func TestSplitTopics(t *testing.T) {
	for in, want := range map[string][]string{
		"":              nil,
		" , ":           nil,
		"a":             {"a"},
		" a, b ,,c , ":  {"a", "b", "c"},
		"orders,orders": {"orders", "orders"},
	} {
		if got := SplitTopics(in); !slices.Equal(got, want) {
			t.Errorf("SplitTopics(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOutboxTopicsAgainstStack(t *testing.T) {
	pool := testenv.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	table, err := migrations.ParseTable(testenv.Schema(t, pool, "doctor") + ".outbox")
	if err != nil {
		t.Fatal(err)
	}
	render := func(at, et string) string { return at + "." + et }
	if got := OutboxTopics(ctx, pool, table, render); got != nil {
		t.Errorf("no table: %q", got)
	}
	if _, err := migrations.Apply(ctx, pool, table, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+table.Quoted()+` (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload)
		SELECT gen_random_uuid(), 'order', 'o-' || i, 1, CASE WHEN i % 2 = 0 THEN 'placed' ELSE 'paid' END, 1, '{}' FROM generate_series(1, 10) i`); err != nil {
		t.Fatal(err)
	}
	got := OutboxTopics(ctx, pool, table, render)
	slices.Sort(got)
	if want := []string{"order.paid", "order.placed"}; !slices.Equal(got, want) {
		t.Errorf("topics %q, want %q", got, want)
	}
	// Several event types may share a topic: each is named once.
	if got := OutboxTopics(ctx, pool, table, func(at, _ string) string { return at }); !slices.Equal(got, []string{"order"}) {
		t.Errorf("shared topic: %q", got)
	}
}
