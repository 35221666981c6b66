package pgstats

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
)

// TestScrapeOnServer runs the collector's queries against the server of
// OUTBOX_RELAY_TEST_DATABASE_URL: PostgreSQL 15 in `make integration`, 16,
// 17 and 18 in the version matrix (`make versions`), so a view that
// changes between versions shows up as a scrape error here.
func TestScrapeOnServer(t *testing.T) {
	sc := testenv.Reserve(t)
	ctx, pool, name := sc.Ctx, sc.Pool, sc.Schema // the slot is named after the reserved schema
	table := pgx.Identifier{name, "outbox"}.Sanitize()
	for _, sql := range []string{
		`CREATE SCHEMA ` + pgx.Identifier{name}.Sanitize(), // dropped with the table by Reserve's cleanup
		`CREATE TABLE ` + table + ` (id bigint PRIMARY KEY, payload text)`,
		`INSERT INTO ` + table + ` SELECT g, repeat('x', 100) FROM generate_series(1, 100) g`,
		`SELECT pg_create_logical_replication_slot('` + name + `', 'pgoutput')`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(cctx, `SELECT pg_drop_replication_slot($1)`, name); err != nil {
			t.Errorf("drop slot %s: %v", name, err)
		}
	})

	m := metrics.New()
	c := New(pool, Config{Slot: name, Table: table, TableLabel: name + ".outbox", Interval: time.Second}, m.PG, slog.New(slog.DiscardHandler))
	if err := c.Scrape(ctx, time.Now()); err != nil {
		t.Fatalf("Scrape: %v", err)
	}
	for _, g := range []struct {
		name      string
		got, want float64
	}{
		{"slot_exists", testutil.ToFloat64(m.PG.SlotExists.WithLabelValues(name)), 1},
		{"slot_active", testutil.ToFloat64(m.PG.SlotActive.WithLabelValues(name)), 0},
		{`slot_wal_status{status="reserved"}`, testutil.ToFloat64(m.PG.SlotWALStatus.WithLabelValues(name, "reserved")), 1},
		{`slot_wal_status{status="lost"}`, testutil.ToFloat64(m.PG.SlotWALStatus.WithLabelValues(name, "lost")), 0},
		{"table_live_tuples known", b2f(testutil.CollectAndCount(m.PG.TableLiveTuples) == 1), 1},
		{"table_bytes > 0", b2f(testutil.ToFloat64(m.PG.TableBytes.WithLabelValues(name+".outbox")) > 0), 1},
		{"slot_retained_wal_bytes >= 0", b2f(testutil.ToFloat64(m.PG.SlotRetainedWAL.WithLabelValues(name)) >= 0), 1},
	} {
		if g.got != g.want {
			t.Errorf("%s = %v, want %v", g.name, g.got, g.want)
		}
	}
	if n := testutil.ToFloat64(m.PG.ScrapeErrors.WithLabelValues(metrics.SourceSlot)); n != 0 {
		t.Errorf("slot scrape errors = %v", n)
	}
}
