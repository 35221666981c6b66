package pgstats

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// fakeRow scans fixed values (nil for NULL) or returns err.
type fakeRow struct {
	vals []any
	err  error
}

func (r fakeRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	for i, d := range dest {
		v := r.vals[i]
		switch d := d.(type) {
		case *bool:
			*d = v.(bool)
		case *int64:
			*d = v.(int64)
		case **string:
			if v != nil {
				s := v.(string)
				*d = &s
			} else {
				*d = nil
			}
		case **int64:
			if v != nil {
				n := v.(int64)
				*d = &n
			} else {
				*d = nil
			}
		case **float64:
			if v != nil {
				f := v.(float64)
				*d = &f
			} else {
				*d = nil
			}
		default:
			panic("unexpected scan type")
		}
	}
	return nil
}

// fakeDB answers the slot and the table query.
type fakeDB struct{ slot, table fakeRow }

func (f *fakeDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, "pg_replication_slots") {
		return f.slot
	}
	return f.table
}

var t0 = time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)

func newTestCollector(db DB, budget int64) (*Collector, *metrics.Relay) {
	m := metrics.New()
	c := New(db, Config{Slot: "s1", Table: `"public"."outbox"`, TableLabel: "public.outbox", Interval: 15 * time.Second, DiskBudget: budget},
		m.PG, slog.New(slog.DiscardHandler))
	return c, m
}

func TestScrapeSetsGauges(t *testing.T) {
	db := &fakeDB{
		slot:  fakeRow{vals: []any{false, "extended", int64(1 << 20), int64(5000), int64(8000)}},
		table: fakeRow{vals: []any{int64(81920), int64(100), int64(7), float64(1.7e9)}},
	}
	c, m := newTestCollector(db, 0)
	if err := c.Scrape(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	pg := m.PG
	for name, c := range map[string]struct{ got, want float64 }{
		"exists":      {testutil.ToFloat64(pg.SlotExists.WithLabelValues("s1")), 1},
		"active":      {testutil.ToFloat64(pg.SlotActive.WithLabelValues("s1")), 0},
		"lag":         {testutil.ToFloat64(pg.SlotLag.WithLabelValues("s1")), 5000},
		"retained":    {testutil.ToFloat64(pg.SlotRetainedWAL.WithLabelValues("s1")), 8000},
		"safe":        {testutil.ToFloat64(pg.SlotSafeWALSize.WithLabelValues("s1")), 1 << 20},
		"extended":    {testutil.ToFloat64(pg.SlotWALStatus.WithLabelValues("s1", "extended")), 1},
		"reserved":    {testutil.ToFloat64(pg.SlotWALStatus.WithLabelValues("s1", "reserved")), 0},
		"table bytes": {testutil.ToFloat64(pg.TableBytes.WithLabelValues("public.outbox")), 81920},
		"dead tuples": {testutil.ToFloat64(pg.TableDeadTuples.WithLabelValues("public.outbox")), 7},
		"autovacuum":  {testutil.ToFloat64(pg.TableLastAutovacuum.WithLabelValues("public.outbox")), 1.7e9},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
	// One sample: no rate yet, so no forecast series.
	if n := testutil.CollectAndCount(pg.SlotWALExhaustion); n != 0 {
		t.Errorf("exhaustion has %d series after one sample, want none", n)
	}
	// 15 s later the slot retains 1500 bytes more: 100 B/s against
	// safe_wal_size 1 MiB - 1500.
	db.slot = fakeRow{vals: []any{false, "extended", int64(1<<20 - 1500), int64(6500), int64(9500)}}
	if err := c.Scrape(context.Background(), t0.Add(15*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, want := testutil.ToFloat64(pg.SlotWALExhaustion.WithLabelValues("s1")), float64(1<<20-1500)/100; math.Abs(got-want) > 1e-6 {
		t.Errorf("exhaustion = %v, want %v", got, want)
	}
}

func TestScrapeUnlimitedAndLost(t *testing.T) {
	db := &fakeDB{
		slot:  fakeRow{vals: []any{true, "reserved", nil, int64(10), int64(20)}},
		table: fakeRow{vals: []any{int64(1), int64(0), int64(0), nil}},
	}
	c, m := newTestCollector(db, 0)
	for i := 0; i < 3; i++ {
		if err := c.Scrape(context.Background(), t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for name, n := range map[string]int{
		"safe_wal_size (unlimited)":   testutil.CollectAndCount(m.PG.SlotSafeWALSize),
		"exhaustion (no limit)":       testutil.CollectAndCount(m.PG.SlotWALExhaustion),
		"autovacuum (never vacuumed)": testutil.CollectAndCount(m.PG.TableLastAutovacuum),
	} {
		if n != 0 {
			t.Errorf("%s: %d series, want none", name, n)
		}
	}
	// With a disk budget the same slot gets a forecast; flat WAL: +Inf.
	c, m = newTestCollector(db, 1<<30)
	for i := 0; i < 3; i++ {
		_ = c.Scrape(context.Background(), t0.Add(time.Duration(i)*time.Second))
	}
	if got := testutil.ToFloat64(m.PG.SlotWALExhaustion.WithLabelValues("s1")); !math.IsInf(got, 1) {
		t.Errorf("flat WAL with a budget: exhaustion %v, want +Inf", got)
	}
	db.slot = fakeRow{vals: []any{false, "lost", nil, nil, nil}}
	_ = c.Scrape(context.Background(), t0.Add(time.Minute))
	if got := testutil.ToFloat64(m.PG.SlotWALExhaustion.WithLabelValues("s1")); got != 0 {
		t.Errorf("lost slot: exhaustion %v, want 0", got)
	}
	if got := testutil.ToFloat64(m.PG.SlotWALStatus.WithLabelValues("s1", "lost")); got != 1 {
		t.Errorf("lost slot: wal_status{lost} %v, want 1", got)
	}
}

func TestScrapeMissingSlotAndErrors(t *testing.T) {
	db := &fakeDB{
		slot:  fakeRow{vals: []any{true, "reserved", int64(100), int64(10), int64(20)}},
		table: fakeRow{vals: []any{int64(1), int64(0), int64(0), nil}},
	}
	c, m := newTestCollector(db, 0)
	_ = c.Scrape(context.Background(), t0)
	db.slot = fakeRow{err: pgx.ErrNoRows}
	if err := c.Scrape(context.Background(), t0.Add(time.Second)); err != nil {
		t.Fatalf("a missing slot is a state, not an error: %v", err)
	}
	if got := testutil.ToFloat64(m.PG.SlotExists.WithLabelValues("s1")); got != 0 {
		t.Errorf("slot_exists = %v, want 0", got)
	}
	for _, g := range []struct {
		name string
		n    int
	}{
		{"lag", testutil.CollectAndCount(m.PG.SlotLag)},
		{"active", testutil.CollectAndCount(m.PG.SlotActive)},
		{"wal_status", testutil.CollectAndCount(m.PG.SlotWALStatus)},
	} {
		if g.n != 0 {
			t.Errorf("%s keeps %d stale series after the slot went", g.name, g.n)
		}
	}

	db.slot = fakeRow{err: errors.New("canceling statement due to statement timeout")}
	db.table = fakeRow{err: pgx.ErrNoRows} // table dropped
	if err := c.Scrape(context.Background(), t0.Add(2*time.Second)); err == nil {
		t.Fatal("want the errors returned")
	}
	if got := testutil.ToFloat64(m.PG.ScrapeErrors.WithLabelValues(metrics.SourceSlot)); got != 1 {
		t.Errorf("scrape errors{slot} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.PG.ScrapeErrors.WithLabelValues(metrics.SourceTable)); got != 1 {
		t.Errorf("scrape errors{table} = %v, want 1", got)
	}
}

// TestRunStopsAndZeroIntervalIsOff runs in a synctest bubble: Run's ticker
// and the test's waits are on the fake clock.
func TestRunStopsAndZeroIntervalIsOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &fakeDB{slot: fakeRow{err: pgx.ErrNoRows}, table: fakeRow{err: pgx.ErrNoRows}}
		m := metrics.New()
		off := New(db, Config{Slot: "s1", Interval: 0}, m.PG, slog.New(slog.DiscardHandler))
		off.Run(context.Background()) // returns at once
		if n := testutil.CollectAndCount(m.PG.SlotExists); n != 0 {
			t.Fatalf("interval 0 scraped anyway")
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		on := New(db, Config{Slot: "s1", Interval: time.Millisecond}, m.PG, slog.New(slog.DiscardHandler))
		go func() { on.Run(ctx); close(done) }()
		time.Sleep(20 * time.Millisecond) // virtual time: 20 ticks of Run's
		cancel()
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Fatal("Run did not stop")
		}
		if n := testutil.CollectAndCount(m.PG.SlotExists); n != 1 {
			t.Fatalf("Run did not scrape")
		}
	})
}

// standbyDB answers the slot query and the replay position of a standby
// (replayed nil: not in recovery any more).
type standbyDB struct {
	fakeDB
	replayed any
}

func (f *standbyDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, "pg_last_wal_replay_lsn()::text END") {
		return fakeRow{vals: []any{f.replayed}}
	}
	return f.fakeDB.QueryRow(ctx, sql, args...)
}

// primaryDB answers the primary's distance to a position.
type primaryDB struct {
	fakeDB
	lag int64
}

func (f *primaryDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, "pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)") {
		return fakeRow{vals: []any{f.lag}}
	}
	return f.fakeDB.QueryRow(ctx, sql, args...)
}

// TestStandbyReplayLag: decoding on a standby, the replay lag is the
// primary's position minus the standby's replayed one; the slot is read on
// the standby; a standby no longer in recovery has no series, and neither
// has a relay that decodes on the primary.
func TestStandbyReplayLag(t *testing.T) {
	slotRow := fakeRow{vals: []any{true, "reserved", nil, int64(100), int64(200)}}
	table := fakeRow{vals: []any{int64(8192), int64(1), int64(0), nil}}
	standby := &standbyDB{fakeDB: fakeDB{slot: slotRow, table: table}, replayed: "0/3000000"}
	primary := &primaryDB{fakeDB: fakeDB{slot: fakeRow{err: pgx.ErrNoRows}, table: table}, lag: 4096}
	m := metrics.New()
	c := New(primary, Config{Slot: "s1", SlotDB: standby, Table: `"public"."outbox"`, TableLabel: "public.outbox", Interval: time.Second},
		m.PG, slog.New(slog.DiscardHandler))
	if err := c.Scrape(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.PG.StandbyReplayLag.WithLabelValues("s1")); got != 4096 {
		t.Errorf("replay lag %v, want 4096", got)
	}
	if got := testutil.ToFloat64(m.PG.SlotLag.WithLabelValues("s1")); got != 100 {
		t.Errorf("slot lag %v, want 100 (read on the standby)", got)
	}
	standby.replayed = nil
	if err := c.Scrape(context.Background(), t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.PG.StandbyReplayLag); n != 0 {
		t.Errorf("%d replay-lag series for a promoted standby, want none", n)
	}
	onPrimary, m2 := newTestCollector(&fakeDB{slot: slotRow, table: table}, 0)
	if err := onPrimary.Scrape(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m2.PG.StandbyReplayLag); n != 0 {
		t.Errorf("%d replay-lag series decoding on the primary, want none", n)
	}
}
