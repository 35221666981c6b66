//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/outboxprom"
)

// logLines is a slog handler that keeps the monitor's lines for the
// assertions and passes them to the test log.
type logLines struct {
	t     testing.TB
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelInfo }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	l.t.Log("monitor: " + b.String())
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }
func (l *logLines) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// TestBackpressureRetainedWAL is issue 19's real-stack case: the relay
// stops, its slot stays, and WAL written meanwhile (segment switches after
// small inserts into a scratch table) grows the retained WAL past a small
// soft budget. Non-critical appends then fail with ErrBackpressure before
// anything is written, critical ones go through; once the relay is back,
// has caught up and the reading refreshed, non-critical appends succeed
// again. The engaged gauge, the refusal counter and the log lines follow.
func TestBackpressureRetainedWAL(t *testing.T) {
	inSuites(t, parallel, stack)
	const budget = 48 << 20 // 3 WAL segments
	env := NewEnv(t, EnvOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	table, err := migrations.ParseTable(env.Table)
	if err != nil {
		t.Fatal(err)
	}
	scratch := pgx.Identifier{"public", "it_other_" + env.Sfx}.Sanitize() // dropped by the Env's cleanup
	env.Exec(`create table ` + scratch + ` (id bigserial primary key, note text)`)

	reg := prometheus.NewRegistry()
	metrics := outboxprom.New(reg)
	logs := &logLines{t: t}
	mon, err := outbox.NewHealthMonitor(pool, outbox.HealthConfig{
		Slot: env.Slot, Table: table, Interval: time.Second, // stale after 3 s: a loaded machine must not make it fail open
		Soft: outbox.Budget{MaxRetainedWAL: budget},
	}, outbox.WithLogger(slog.New(logs)), outbox.WithMetrics(metrics))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go mon.Run(runCtx)
	w := outbox.NewWriter(table, outbox.WithBackpressure(mon), outbox.WithMetrics(metrics))

	seq := 0
	appendTx := func(events ...*outbox.Event) error {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if len(events) == 1 {
			err = w.Append(ctx, outbox.PgxTx(tx), events[0])
		} else {
			err = w.AppendBatch(ctx, outbox.PgxTx(tx), events)
		}
		// Commit even after a refusal: whatever the refused call wrote
		// would show in the row count.
		if cerr := tx.Commit(ctx); cerr != nil {
			t.Fatalf("commit: %v", cerr)
		}
		return err
	}
	event := func(p outbox.Priority, eventType string) *outbox.Event {
		seq++
		return &outbox.Event{AggregateType: env.AggType, AggregateID: fmt.Sprintf("o-%d", seq), AggregateVersion: 1,
			EventType: eventType, SchemaVersion: 1, Payload: []byte(`{}`), Priority: p}
	}
	rows := func() int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `select count(*) from `+table.Quoted()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	currentLSN := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `select pg_current_wal_lsn()::text`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// freshReading waits for a reading taken after now.
	freshReading := func() outbox.Health {
		t.Helper()
		since := time.Now()
		var h outbox.Health
		if !within(10*time.Second, 50*time.Millisecond, func() bool { h = mon.Health(); return h.At.After(since) }) {
			t.Fatalf("no fresh reading within 10 s: %+v", h)
		}
		return h
	}
	// 1. The relay runs and confirms: the reading is inside the budget.
	relay := env.StartRelay()
	if err := appendTx(event(outbox.PriorityLow, "order.viewed")); err != nil {
		t.Fatalf("non-critical append with the relay running: %v", err)
	}
	lsn := currentLSN()
	if !within(30*time.Second, 100*time.Millisecond, func() bool { return env.ConfirmedAtLeast(lsn) }) {
		t.Fatalf("the relay did not confirm %s\n%s", lsn, relay.LogTail(30))
	}
	// released waits until the reading is inside the budget. The slot's
	// restart_lsn moves once the relay confirms past a record of the
	// running transactions: a checkpoint writes one (the background
	// writer does every 15 s). A transaction held open elsewhere on the
	// server would hold restart_lsn back.
	released := func(what string) {
		t.Helper()
		var last time.Time
		if !within(30*time.Second, 100*time.Millisecond, func() bool {
			if time.Since(last) > 3*time.Second {
				env.Exec(`checkpoint`)
				last = time.Now()
			}
			return mon.Check(outbox.PriorityLow) == nil && mon.Health().RetainedWAL < budget*9/10
		}) {
			t.Fatalf("%s: the reading stays over the budget: %+v\n%s", what, mon.Health(), relay.LogTail(20))
		}
	}
	released("relay running")
	h := freshReading()
	t.Logf("relay running: retained WAL %d B, forecast %v, oldest unacknowledged %v", h.RetainedWAL, h.Forecast, h.OldestUnacked)

	// 2. The relay stops; the slot keeps its position while WAL grows.
	if _, exited := relay.Term(30 * time.Second); !exited {
		t.Fatal("relay did not stop")
	}
	start := time.Now()
	for round := 0; mon.Check(outbox.PriorityLow) == nil; round++ {
		if round == 20 {
			t.Fatalf("retained WAL never crossed %d B: %+v", budget, mon.Health())
		}
		env.Exec(`insert into ` + scratch + ` (note) values ('wal')`)
		env.Exec(`select pg_switch_wal()`)
		freshReading()
	}
	h = mon.Health()
	t.Logf("budget crossed after %s: retained WAL %d B, forecast %v, oldest unacknowledged %v",
		time.Since(start).Round(time.Millisecond), h.RetainedWAL, h.Forecast, h.OldestUnacked)
	if h.RetainedWAL <= budget {
		t.Fatalf("refusing at retained WAL %d <= budget %d", h.RetainedWAL, budget)
	}

	// 3. Non-critical events are refused before anything is written;
	// critical ones go through.
	before := rows()
	err = appendTx(event(outbox.PriorityLow, "order.viewed"))
	var be *outbox.BackpressureError
	if !errors.Is(err, outbox.ErrBackpressure) || !errors.As(err, &be) || be.Level != outbox.BackpressureSoft {
		t.Fatalf("non-critical append over the budget: %v", err)
	}
	t.Logf("refusal: %v", err)
	if !strings.Contains(err.Error(), "retained WAL") || !strings.Contains(err.Error(), env.Slot) {
		t.Fatalf("the refusal does not name the budget and the slot: %v", err)
	}
	err = appendTx(event(outbox.PriorityCritical, "order.confirmed"), event(outbox.PriorityLow, "order.viewed"))
	if !errors.Is(err, outbox.ErrBackpressure) {
		t.Fatalf("mixed batch over the budget: %v", err)
	}
	if n := rows(); n != before {
		t.Fatalf("refused appends wrote %d rows", n-before)
	}
	if err := appendTx(event(outbox.PriorityCritical, "order.confirmed")); err != nil {
		t.Fatalf("critical append over the soft budget: %v", err)
	}
	if err := appendTx(event(outbox.PriorityCritical, "order.paid"), event(outbox.PriorityCritical, "order.shipped")); err != nil {
		t.Fatalf("critical batch over the soft budget: %v", err)
	}
	if n := rows(); n != before+3 {
		t.Fatalf("critical appends wrote %d rows, want 3", n-before)
	}
	if got := registryValue(t, reg, "outbox_producer_backpressure_refused_total", "level", outbox.BackpressureSoft, "event_type", "order.viewed"); got != 2 {
		t.Fatalf(`backpressure_refused_total{level="soft",event_type="order.viewed"} = %v, want 2`, got)
	}
	if got := registryValue(t, reg, "outbox_producer_backpressure_engaged", "level", outbox.BackpressureSoft); got != 1 {
		t.Fatalf("backpressure_engaged{soft} = %v, want 1", got)
	}
	if logs.count("WARN back-pressure engaged") != 1 {
		t.Fatal("no engage line")
	}

	// 4. The relay comes back and catches up; once the slot's restart_lsn
	// moves and the reading refreshes, non-critical appends succeed again.
	relay = env.StartRelay()
	lsn = currentLSN()
	if !within(30*time.Second, 100*time.Millisecond, func() bool { return env.ConfirmedAtLeast(lsn) }) {
		t.Fatalf("the restarted relay did not catch up to %s\n%s", lsn, relay.LogTail(30))
	}
	caughtUp := time.Now()
	released("relay caught up")
	h = mon.Health()
	t.Logf("released %s after the relay caught up: retained WAL %d B", time.Since(caughtUp).Round(time.Millisecond), h.RetainedWAL)
	if err := appendTx(event(outbox.PriorityLow, "order.viewed")); err != nil {
		t.Fatalf("non-critical append after release: %v", err)
	}
	if n := rows(); n != before+4 {
		t.Fatalf("rows = %d, want %d", n, before+4)
	}
	if got := registryValue(t, reg, "outbox_producer_backpressure_engaged", "level", outbox.BackpressureSoft); got != 0 {
		t.Fatalf("backpressure_engaged{soft} = %v after release, want 0", got)
	}
	if logs.count("INFO back-pressure released") != 1 {
		t.Fatal("no release line")
	}
	// The relay delivers what was written meanwhile.
	lsn = currentLSN()
	if !within(30*time.Second, 100*time.Millisecond, func() bool { return env.ConfirmedAtLeast(lsn) }) {
		t.Fatalf("the relay did not confirm the last append\n%s", relay.LogTail(30))
	}
}

// registryValue returns the value of the series of name with the given
// label pairs in reg (0 when there is none).
func registryValue(t *testing.T, reg *prometheus.Registry, name string, labelPairs ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labelPairs); i += 2 {
				if have[labelPairs[i]] != labelPairs[i+1] {
					continue series
				}
			}
			if c := s.GetCounter(); c != nil {
				return c.GetValue()
			}
			return s.GetGauge().GetValue()
		}
	}
	return 0
}
