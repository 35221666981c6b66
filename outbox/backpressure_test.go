package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/migrations"
)

const mib = 1 << 20

func TestBudgetCrossed(t *testing.T) {
	reading := func(retained int64, forecast, oldest time.Duration) Health {
		return Health{RetainedWAL: retained, SafeWALSize: -1, Forecast: forecast, OldestUnacked: oldest}
	}
	b := Budget{MinForecast: time.Hour, MaxRetainedWAL: 100 * mib, MaxOldestEvent: 10 * time.Minute}
	cases := []struct {
		name    string
		budget  Budget
		h       Health
		engaged bool
		want    []string // substrings, one per reason; nil: not crossed
	}{
		{"zero budget checks nothing", Budget{}, reading(1<<40, 0, time.Hour), false, nil},
		{"all inside", b, reading(50*mib, 2*time.Hour, time.Minute), false, nil},
		{"retained over", b, reading(101*mib, -1, 0), false, []string{"retained WAL 101.0 MiB > budget 100.0 MiB"}},
		{"retained at the limit is inside", b, reading(100*mib, -1, 0), false, nil},
		{"forecast under", b, reading(0, 59*time.Minute, 0), false, []string{"WAL exhaustion forecast 59m0s < budget 1h0m0s"}},
		{"forecast reached (0)", b, reading(0, 0, 0), false, []string{"forecast 0s < budget"}},
		{"no forecast (-1: no limit, one sample, not growing) is not checked", b, reading(0, -1, 0), false, nil},
		{"oldest over", b, reading(0, -1, 11*time.Minute), false, []string{"oldest unacknowledged event 11m0s > budget 10m0s"}},
		{"oldest unknown (-1) is not checked", b, reading(0, -1, -1), false, nil},
		{"every limit at once", b, reading(200*mib, time.Minute, time.Hour), false,
			[]string{"retained WAL", "forecast", "oldest"}},
		{"only the set fields count", Budget{MaxRetainedWAL: 100 * mib}, reading(10*mib, 0, 24*time.Hour), false, nil},

		// Hysteresis: an engaged budget releases 10% inside its limits.
		{"engaged: retained between release point and budget stays", b, reading(95*mib, -1, 0), true,
			[]string{"retained WAL 95.0 MiB > release point 90.0 MiB"}},
		{"engaged: retained under the release point releases", b, reading(89*mib, -1, 0), true, nil},
		{"not engaged: the same 95 MiB does not engage", b, reading(95*mib, -1, 0), false, nil},
		{"engaged: forecast just over the budget stays", b, reading(0, 65*time.Minute, 0), true,
			[]string{"forecast 1h5m0s < release point 1h6m40s"}},
		{"engaged: forecast past the release point releases", b, reading(0, 67*time.Minute, 0), true, nil},
		{"engaged: forecast gone (not growing) releases", b, reading(0, -1, 0), true, nil},
		{"engaged: oldest between release point and budget stays", b, reading(0, -1, 9*time.Minute+30*time.Second), true,
			[]string{"oldest unacknowledged event 9m30s > release point 9m0s"}},
		{"engaged: oldest under the release point releases", b, reading(0, -1, 8*time.Minute), true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.budget.crossed(c.h, c.engaged)
			if len(got) != len(c.want) {
				t.Fatalf("crossed = %q, want %d reasons like %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("reason %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestBackpressureErrorIsAndMessage(t *testing.T) {
	var err error = &BackpressureError{Level: BackpressureSoft, Reasons: []string{"retained WAL 2.0 GiB > budget 1.0 GiB"}}
	if !errors.Is(err, ErrBackpressure) {
		t.Fatal("errors.Is(ErrBackpressure) = false")
	}
	wrapped := fmt.Errorf("confirm order: %w", err)
	var be *BackpressureError
	if !errors.As(wrapped, &be) || be.Level != BackpressureSoft {
		t.Fatalf("errors.As = %v, %+v", errors.As(wrapped, &be), be)
	}
	want := "outbox: back-pressure: soft budget crossed (non-critical events are refused): retained WAL 2.0 GiB > budget 1.0 GiB"
	if err.Error() != want {
		t.Fatalf("Error() = %q\nwant      %q", err.Error(), want)
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 100 * mib: "100.0 MiB", 3 << 40: "3.0 TiB", -2048: "-2.0 KiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// fakeSlot is a scripted database for the monitor: each query answers
// with the current row or error.
type fakeSlot struct {
	mu      sync.Mutex
	slot    []any // wal_status, safe_wal_size, retained, current, confirmed (nil: NULL)
	slotErr error
	cpAge   []any // commit age in seconds (nil: NULL); no row when cpRows is false
	cpRows  bool
	cpErr   error
	queries int
}

func (f *fakeSlot) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries++
	if strings.Contains(sql, "pg_replication_slots") {
		return scriptedRow{vals: f.slot, err: f.slotErr}
	}
	if f.cpErr != nil {
		return scriptedRow{err: f.cpErr}
	}
	if !f.cpRows {
		return scriptedRow{err: pgx.ErrNoRows}
	}
	return scriptedRow{vals: f.cpAge}
}

func (f *fakeSlot) set(status string, safe any, retained, current, confirmed int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slot = []any{status, safe, retained, current, confirmed}
	f.slotErr = nil
}

func (f *fakeSlot) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slotErr = err
}

type scriptedRow struct {
	vals []any
	err  error
}

func (r scriptedRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.vals) {
		return fmt.Errorf("scan %d values into %d destinations", len(r.vals), len(dest))
	}
	for i, d := range dest {
		v := r.vals[i]
		switch d := d.(type) {
		case **string:
			*d = nil
			if v != nil {
				s := v.(string)
				*d = &s
			}
		case **int64:
			*d = nil
			if v != nil {
				n := toInt64(v)
				*d = &n
			}
		case *int64:
			*d = toInt64(v)
		case **float64:
			*d = nil
			if v != nil {
				f := v.(float64)
				*d = &f
			}
		default:
			return fmt.Errorf("unexpected scan type %T", d)
		}
	}
	return nil
}

func toInt64(v any) int64 {
	switch v := v.(type) {
	case int:
		return int64(v)
	case int64:
		return v
	}
	panic(fmt.Sprintf("not an integer: %T", v))
}

// metricsRecorder records what the monitor and the Writer report.
type metricsRecorder struct {
	mu      sync.Mutex
	engaged []string // "soft=true" ...
	refused map[string]int
}

func (r *metricsRecorder) TransitionConflict(string, string) {}
func (r *metricsRecorder) BackpressureRefused(level, eventType string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused == nil {
		r.refused = map[string]int{}
	}
	r.refused[level+" "+eventType]++
}
func (r *metricsRecorder) BackpressureEngaged(level string, engaged bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.engaged = append(r.engaged, fmt.Sprintf("%s=%v", level, engaged))
}

func (r *metricsRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.engaged
	r.engaged = nil
	return out
}

// logRecorder keeps the monitor's log records.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// lines returns "LEVEL message key=value..." of records at info and above.
func (l *logRecorder) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if r.Level < slog.LevelInfo {
			continue
		}
		var b strings.Builder
		b.WriteString(r.Level.String() + " " + r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		out = append(out, b.String())
	}
	l.records = nil
	return out
}

type monitorFixture struct {
	m   *HealthMonitor
	db  *fakeSlot
	met *metricsRecorder
	log *logRecorder
	now time.Time
}

var tStart = time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, cfg HealthConfig) *monitorFixture {
	t.Helper()
	f := &monitorFixture{db: &fakeSlot{}, met: &metricsRecorder{}, log: &logRecorder{}, now: tStart}
	cfg.Slot = "orders"
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Second
	}
	m, err := NewHealthMonitor(f.db, cfg, WithMetrics(f.met), WithLogger(slog.New(f.log)))
	if err != nil {
		t.Fatal(err)
	}
	m.now = func() time.Time { return f.now }
	f.m = m
	return f
}

// step advances the clock by one interval and refreshes.
func (f *monitorFixture) step(t *testing.T) error {
	t.Helper()
	f.now = f.now.Add(f.m.cfg.Interval)
	return f.m.Refresh(context.Background())
}

func refusedAt(t *testing.T, err error, level string) {
	t.Helper()
	var be *BackpressureError
	if !errors.As(err, &be) || !errors.Is(err, ErrBackpressure) || be.Level != level {
		t.Fatalf("err = %v, want a %s *BackpressureError", err, level)
	}
}

func TestMonitorSoftBudgetEngagesAndReleases(t *testing.T) {
	f := newFixture(t, HealthConfig{Soft: Budget{MaxRetainedWAL: 100 * mib}})
	if err := f.m.Check(PriorityLow); err != nil {
		t.Fatalf("before any reading: %v", err)
	}
	f.db.set("reserved", int64(4<<30), 10*mib, 1000, 1000)
	if err := f.step(t); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Check(PriorityLow); err != nil {
		t.Fatalf("inside the budget: %v", err)
	}

	f.db.set("reserved", int64(4<<30), 120*mib, 2000, 1000)
	_ = f.step(t)
	refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft)
	if err := f.m.Check(PriorityCritical); err != nil {
		t.Fatalf("critical refused by the soft budget: %v", err)
	}
	err := f.m.Check(PriorityLow)
	if want := `outbox: back-pressure: soft budget crossed on slot "orders" (non-critical events are refused): retained WAL 120.0 MiB > budget 100.0 MiB`; err.Error() != want {
		t.Fatalf("Error() = %q\nwant      %q", err, want)
	}
	if got := f.met.take(); fmt.Sprint(got) != "[soft=true]" {
		t.Fatalf("engaged metrics = %v", got)
	}
	logs := f.log.take()
	if len(logs) != 1 || !strings.HasPrefix(logs[0], "WARN back-pressure engaged: non-critical events are refused") ||
		!strings.Contains(logs[0], "budget=soft") || !strings.Contains(logs[0], "retained_wal_bytes=125829120") ||
		!strings.Contains(logs[0], "reasons=[retained WAL 120.0 MiB > budget 100.0 MiB]") {
		t.Fatalf("engage log = %q", logs)
	}

	// Inside the budget but not below the release point: still engaged,
	// no new line, no new metric.
	f.db.set("reserved", int64(4<<30), 95*mib, 3000, 1000)
	_ = f.step(t)
	refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft)
	if got, logs := f.met.take(), f.log.take(); len(got)+len(logs) != 0 {
		t.Fatalf("no transition, yet metrics %v logs %q", got, logs)
	}

	f.db.set("reserved", int64(4<<30), 80*mib, 4000, 4000)
	_ = f.step(t)
	if err := f.m.Check(PriorityLow); err != nil {
		t.Fatalf("below the release point: %v", err)
	}
	if got := f.met.take(); fmt.Sprint(got) != "[soft=false]" {
		t.Fatalf("release metrics = %v", got)
	}
	if logs := f.log.take(); len(logs) != 1 || !strings.HasPrefix(logs[0], "INFO back-pressure released") ||
		!strings.Contains(logs[0], "back inside the budget") {
		t.Fatalf("release log = %q", logs)
	}
}

func TestMonitorHardBudgetRefusesCritical(t *testing.T) {
	f := newFixture(t, HealthConfig{
		Soft: Budget{MaxRetainedWAL: 100 * mib},
		Hard: Budget{MaxRetainedWAL: 500 * mib},
	})
	f.db.set("extended", nil, 600*mib, 2000, 1000)
	_ = f.step(t)
	refusedAt(t, f.m.Check(PriorityCritical), BackpressureHard)
	// A non-critical event is refused by the budget meant for it.
	refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft)
	if got := f.met.take(); fmt.Sprint(got) != "[soft=true hard=true]" {
		t.Fatalf("metrics = %v", got)
	}
	if logs := f.log.take(); len(logs) != 2 || !strings.HasPrefix(logs[1], "ERROR back-pressure engaged: every event is refused") {
		t.Fatalf("logs = %q", logs)
	}
	f.db.set("extended", nil, 300*mib, 3000, 1000)
	_ = f.step(t)
	if err := f.m.Check(PriorityCritical); err != nil {
		t.Fatalf("hard released, critical still refused: %v", err)
	}
	refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft)
}

func TestMonitorHardOnly(t *testing.T) {
	// A Hard budget without a Soft one refuses everything at hard.
	f := newFixture(t, HealthConfig{Hard: Budget{MaxRetainedWAL: 100 * mib}})
	f.db.set("reserved", nil, 200*mib, 2000, 1000)
	_ = f.step(t)
	refusedAt(t, f.m.Check(PriorityLow), BackpressureHard)
	refusedAt(t, f.m.Check(PriorityCritical), BackpressureHard)
}

func TestMonitorStaleReadingFailsOpen(t *testing.T) {
	f := newFixture(t, HealthConfig{Soft: Budget{MaxRetainedWAL: 100 * mib}})
	f.db.set("reserved", nil, 200*mib, 2000, 1000)
	_ = f.step(t)
	refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft)
	f.met.take()
	f.log.take()

	f.db.fail(errors.New("canceling statement due to statement timeout"))
	for i := 1; i <= 3; i++ {
		if err := f.step(t); err == nil {
			t.Fatal("want the refresh error")
		}
		// Up to three intervals after the last success, the reading holds.
		refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft)
	}
	if h := f.m.Health(); h.Err == nil || h.RetainedWAL != 200*mib || !h.At.Equal(tStart.Add(5*time.Second)) {
		t.Fatalf("Health during failures = %+v", h)
	}
	_ = f.step(t) // four intervals: stale
	if err := f.m.Check(PriorityLow); err != nil {
		t.Fatalf("stale reading still refuses: %v", err)
	}
	if got := f.met.take(); fmt.Sprint(got) != "[soft=false]" {
		t.Fatalf("metrics = %v", got)
	}
	logs := f.log.take()
	joined := strings.Join(logs, "\n")
	if !strings.Contains(joined, "WARN back-pressure reading failed") ||
		!strings.Contains(joined, "WARN back-pressure reading is stale: nothing is refused") ||
		!strings.Contains(joined, "INFO back-pressure released") || !strings.Contains(joined, "stale (fails open)") {
		t.Fatalf("logs:\n%s", joined)
	}

	// The next successful refresh engages again.
	f.db.set("reserved", nil, 200*mib, 3000, 1000)
	_ = f.step(t)
	refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft)
	if logs := strings.Join(f.log.take(), "\n"); !strings.Contains(logs, "fresh again") || !strings.Contains(logs, "engaged") {
		t.Fatalf("logs after recovery:\n%s", logs)
	}
}

func TestMonitorCheckExpiresWithoutRefresh(t *testing.T) {
	// Run stopped (or hangs): the engaged state expires by itself.
	f := newFixture(t, HealthConfig{Soft: Budget{MaxRetainedWAL: 100 * mib}})
	f.db.set("reserved", nil, 200*mib, 2000, 1000)
	_ = f.step(t)
	f.now = f.now.Add(15 * time.Second)
	refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft)
	f.now = f.now.Add(time.Nanosecond)
	if err := f.m.Check(PriorityLow); err != nil {
		t.Fatalf("no refresh for more than three intervals, still refused: %v", err)
	}
}

func TestMonitorNeverReadRefusesNothing(t *testing.T) {
	f := newFixture(t, HealthConfig{Soft: Budget{MaxRetainedWAL: 1}, Hard: Budget{MaxRetainedWAL: 1}})
	f.db.fail(pgx.ErrNoRows)
	err := f.step(t)
	if err == nil || !strings.Contains(err.Error(), `replication slot "orders" does not exist`) {
		t.Fatalf("missing slot: err = %v", err)
	}
	if err := f.m.Check(PriorityCritical); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Check(PriorityLow); err != nil {
		t.Fatal(err)
	}
	if h := f.m.Health(); !h.At.IsZero() || h.Err == nil || h.Forecast != -1 || h.OldestUnacked != -1 || h.SafeWALSize != -1 {
		t.Fatalf("Health = %+v", h)
	}
}

func TestMonitorForecast(t *testing.T) {
	f := newFixture(t, HealthConfig{Soft: Budget{MinForecast: time.Hour}, Interval: 10 * time.Second})
	// 100 B/s growth against safe_wal_size.
	f.db.set("reserved", int64(1_000_000), 1000, 5000, 4000)
	_ = f.step(t)
	if h := f.m.Health(); h.Forecast != -1 {
		t.Fatalf("one sample: forecast %v, want -1", h.Forecast)
	}
	f.db.set("reserved", int64(200_000), 2000, 6000, 4000)
	_ = f.step(t)
	if h := f.m.Health(); h.Forecast != 2000*time.Second {
		t.Fatalf("forecast = %v, want 2000s (200000 B at 100 B/s)", h.Forecast)
	}
	refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft)

	// The relay catches up: retained WAL shrinks, no forecast (+Inf).
	f.db.set("reserved", int64(1_000_000), 500, 7000, 7000)
	_ = f.step(t)
	if h := f.m.Health(); h.Forecast != -1 {
		t.Fatalf("shrinking: forecast %v, want -1", h.Forecast)
	}
	if err := f.m.Check(PriorityLow); err != nil {
		t.Fatal(err)
	}

	// A disk budget tighter than safe_wal_size wins (as --wal-disk-budget).
	g := newFixture(t, HealthConfig{DiskBudget: 3000, Interval: 10 * time.Second})
	g.db.set("reserved", nil, 1000, 5000, 4000)
	_ = g.step(t)
	g.db.set("reserved", nil, 2000, 6000, 4000)
	_ = g.step(t)
	if h := g.m.Health(); h.Forecast != 10*time.Second {
		t.Fatalf("disk budget forecast = %v, want 10s", h.Forecast)
	}

	// A lost slot retains nothing: no forecast (the relay's metric says 0
	// to alert; refusing events would protect nothing).
	g.db.set("lost", nil, 0, 7000, 4000)
	g.db.slot[2] = nil // restart_lsn NULL: retained NULL
	_ = g.step(t)
	if h := g.m.Health(); h.Forecast != -1 || h.WALStatus != "lost" || h.RetainedWAL != 0 {
		t.Fatalf("lost slot: %+v", h)
	}
}

func TestMonitorOldestUnacked(t *testing.T) {
	f := newFixture(t, HealthConfig{Soft: Budget{MaxOldestEvent: time.Minute}, Table: migrations.Table{Schema: "public", Name: "outbox"}})
	age := func() time.Duration { t.Helper(); return f.m.Health().OldestUnacked }

	// Everything confirmed.
	f.db.set("reserved", nil, 0, 1000, 1000)
	_ = f.step(t)
	if got := age(); got != 0 {
		t.Fatalf("all confirmed: %v", got)
	}
	// The relay stops at 1000; WAL goes on. The last sample it covered
	// is the previous one, 5 s ago; the next ones count from it.
	for i, want := range []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second} {
		f.db.set("reserved", nil, 0, 2000+int64(i)*1000, 1000)
		_ = f.step(t)
		if got := age(); got != want {
			t.Fatalf("reading %d: age %v, want %v", i, got, want)
		}
	}
	// The checkpoint's commit time (3 s ago) is newer than that sample:
	// everything before it is acknowledged, so it bounds the age.
	f.db.cpRows, f.db.cpAge = true, []any{float64(3)}
	f.db.set("reserved", nil, 0, 6000, 1000)
	_ = f.step(t)
	if got := age(); got != 3*time.Second {
		t.Fatalf("with checkpoint commit 3 s ago: age %v", got)
	}
	// An older commit time does not raise the age past the sample bound.
	f.db.cpAge = []any{float64(3600)}
	f.db.set("reserved", nil, 0, 7000, 1000)
	_ = f.step(t)
	if got := age(); got != 25*time.Second {
		t.Fatalf("old checkpoint commit: age %v, want 25s", got)
	}
	// Past the budget for long enough: engaged.
	for range 8 {
		f.db.set("reserved", nil, 0, 8000, 1000)
		_ = f.step(t)
	}
	refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft)
	// The relay confirms up to the sample taken 50 s ago (6000).
	f.db.cpAge = []any{nil}
	f.db.set("reserved", nil, 0, 9000, 6000)
	_ = f.step(t)
	if got := age(); got != 50*time.Second {
		t.Fatalf("partly confirmed: age %v, want 50s", got)
	}
	if err := f.m.Check(PriorityLow); err != nil {
		t.Fatalf("50 s old is under the 54 s release point: %v", err)
	}

	// A monitor started while WAL was already unconfirmed counts from
	// its first reading (an underestimate: nothing cheap says when that
	// WAL was written), even with an old checkpoint commit time.
	g := newFixture(t, HealthConfig{Table: migrations.Table{Schema: "public", Name: "outbox"}})
	g.db.cpRows, g.db.cpAge = true, []any{float64(7200)}
	for i, want := range []time.Duration{0, 5 * time.Second, 10 * time.Second} {
		g.db.set("reserved", nil, 0, 5000+int64(i), 1000)
		_ = g.step(t)
		if got := g.m.Health().OldestUnacked; got != want {
			t.Fatalf("started late, reading %d: age %v, want %v", i, got, want)
		}
	}
	// No confirmed_flush_lsn (not a logical slot): unknown, not checked.
	g.db.set("reserved", nil, 0, 6000, 0)
	g.db.slot[4] = nil
	_ = g.step(t)
	if got := g.m.Health().OldestUnacked; got != -1 {
		t.Fatalf("no confirmed_flush_lsn: age %v, want -1", got)
	}
}

func TestWalClockThinsLongOutages(t *testing.T) {
	var c walClock
	at := tStart
	c.observe(at, 100, 100, time.Time{})
	for i := range 10 * maxPending {
		at = at.Add(time.Second)
		c.observe(at, int64(200+i), 100, time.Time{})
	}
	if len(c.pending) > maxPending+1 {
		t.Fatalf("%d samples kept, want at most %d", len(c.pending), maxPending+1)
	}
	if got := c.observe(at.Add(time.Second), 100000, 100, time.Time{}); got != time.Duration(10*maxPending+1)*time.Second {
		t.Fatalf("age after thinning = %v, want exact from the covered sample", got)
	}
	// Confirmed moves backwards (a crash): the covered sample no longer
	// counts; the age falls back to the oldest pending sample.
	c.observe(at.Add(2*time.Second), 100001, 50, time.Time{})
	if !c.covered.IsZero() {
		t.Fatal("covered sample kept after confirmed moved backwards")
	}
}

func TestMonitorCheckpointErrorKeepsReadingFresh(t *testing.T) {
	f := newFixture(t, HealthConfig{Soft: Budget{MaxRetainedWAL: 100 * mib}, Table: migrations.Table{Schema: "public", Name: "outbox"}})
	f.db.cpErr = errors.New(`permission denied for table outbox_relay_checkpoint`)
	f.db.set("reserved", nil, 200*mib, 2000, 1000)
	err := f.step(t)
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("err = %v", err)
	}
	h := f.m.Health()
	if h.Err == nil || h.At.IsZero() || h.RetainedWAL != 200*mib {
		t.Fatalf("Health = %+v", h)
	}
	refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft)
	for range 5 {
		_ = f.step(t)
	}
	refusedAt(t, f.m.Check(PriorityLow), BackpressureSoft) // still fresh: the slot is read
	if logs := strings.Join(f.log.take(), "\n"); strings.Count(logs, "relay checkpoint not readable") != 1 {
		t.Fatalf("checkpoint warning not rate-limited:\n%s", logs)
	}
}

func TestMonitorWithoutTableSkipsCheckpoint(t *testing.T) {
	f := newFixture(t, HealthConfig{})
	f.db.cpErr = errors.New("must not be queried")
	f.db.set("reserved", nil, 0, 1000, 1000)
	if err := f.step(t); err != nil {
		t.Fatal(err)
	}
	if f.db.queries != 1 {
		t.Fatalf("%d queries per refresh, want 1 (slot only)", f.db.queries)
	}
}

// TestMonitorRunRefreshesUntilCancelled runs in a synctest bubble: the
// interval's ticker and the test's waits are on the fake clock.
func TestMonitorRunRefreshesUntilCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &fakeSlot{}
		db.set("reserved", nil, 200*mib, 2000, 1000)
		m, err := NewHealthMonitor(db, HealthConfig{Slot: "s", Interval: time.Millisecond, Soft: Budget{MaxRetainedWAL: mib}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		synctest.Wait() // Run refreshed at once and waits for its ticker
		if m.Check(PriorityLow) == nil {
			t.Fatal("Run did not refresh")
		}
		time.Sleep(5 * time.Millisecond) // five more ticks, in virtual time
		synctest.Wait()
		if m.Check(PriorityLow) == nil {
			t.Fatal("Run did not keep refreshing")
		}
		cancel()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("Run did not stop")
		}
	})
}

func TestNewHealthMonitorValidates(t *testing.T) {
	_, err := NewHealthMonitor(nil, HealthConfig{Interval: -1})
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{"db is nil", "Slot: is required", "Interval -1ns: use a positive duration"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "Slot" {
		t.Errorf("want a *FieldError for Slot first, got %v", fe)
	}
	m, err := NewHealthMonitor(&fakeSlot{}, HealthConfig{Slot: "s"})
	if err != nil || m.cfg != (HealthConfig{Slot: "s", Interval: DefaultHealthInterval}) {
		t.Fatalf("defaults: %v, %+v", err, m.cfg)
	}
	var nilMonitor *HealthMonitor
	if err := nilMonitor.Check(PriorityLow); err != nil {
		t.Fatalf("nil monitor: %v", err)
	}
}

// TestNegativeLimitsAreOff: a negative DiskBudget or budget limit is off,
// like 0 (the default): accepted, and nothing is refused or forecast by it.
func TestNegativeLimitsAreOff(t *testing.T) {
	off := Budget{MinForecast: -1, MaxRetainedWAL: -1, MaxOldestEvent: -time.Minute}
	if !off.IsZero() || !(Budget{}).IsZero() || (Budget{MaxRetainedWAL: 1, MinForecast: -1}).IsZero() {
		t.Fatal("IsZero: a Budget of zero or negative limits checks nothing, one positive limit checks")
	}
	f := newFixture(t, HealthConfig{DiskBudget: -1, Soft: off, Hard: off})
	for i, retained := range []int64{10 * mib, 500 * mib, 900 * mib} {
		f.db.set("reserved", nil, retained, 1000*int64(i+2), 1000)
		if err := f.step(t); err != nil {
			t.Fatal(err)
		}
	}
	if h := f.m.Health(); h.Forecast != -1 || h.OldestUnacked <= 0 {
		t.Fatalf("health %+v: want no forecast (no limit) and an oldest event", h)
	}
	if err := f.m.Check(PriorityLow); err != nil {
		t.Fatalf("budgets of negative limits refused: %v", err)
	}
	if got := f.met.take(); len(got) != 0 {
		t.Fatalf("engaged %v, want nothing", got)
	}
}

// engagedMonitor returns a monitor whose soft (and, with hard, hard)
// budget is crossed.
func engagedMonitor(t testing.TB, hard bool) *HealthMonitor {
	db := &fakeSlot{}
	db.set("reserved", nil, 200*mib, 2000, 1000)
	cfg := HealthConfig{Slot: "orders", Soft: Budget{MaxRetainedWAL: mib}}
	if hard {
		cfg.Hard = Budget{MaxRetainedWAL: 2 * mib}
	}
	m, err := NewHealthMonitor(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAppendRefusedBeforeSQL(t *testing.T) {
	met := &metricsRecorder{}
	w := NewWriter(testTable, WithBackpressure(engagedMonitor(t, false)), WithMetrics(met))
	r := &recorder{}
	low := validEvent()
	low.Priority, low.EventType = PriorityLow, "order.viewed"
	err := w.Append(context.Background(), r, low)
	refusedAt(t, err, BackpressureSoft)
	if len(r.calls) != 0 {
		t.Fatalf("refused Append sent %d statements", len(r.calls))
	}
	if low.EventID != uuid.Nil {
		t.Fatal("refused Append assigned an EventID")
	}
	// Critical (the zero value) goes through.
	if err := w.Append(context.Background(), r, validEvent()); err != nil || len(r.calls) != 1 {
		t.Fatalf("critical Append: %v, %d calls", err, len(r.calls))
	}
	// An invalid event reports its problems first, back-pressure or not.
	bad := validEvent()
	bad.Priority, bad.AggregateID = PriorityLow, ""
	if err := w.Append(context.Background(), r, bad); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("invalid low event: %v", err)
	}
	if fmt.Sprint(met.refused) != "map[soft order.viewed:1]" {
		t.Fatalf("refused = %v", met.refused)
	}
}

func TestAppendBatchRefusedWhole(t *testing.T) {
	met := &metricsRecorder{}
	w := NewWriter(testTable, WithBackpressure(engagedMonitor(t, false)), WithMetrics(met))
	r := &recorder{}
	events := []*Event{validEvent(), validEvent(), validEvent()}
	events[1].Priority, events[1].EventType = PriorityLow, "order.viewed"
	err := w.AppendBatch(context.Background(), r, events)
	refusedAt(t, err, BackpressureSoft)
	if !strings.HasPrefix(err.Error(), "event 1 of 3 (order.viewed, low): batch refused: outbox: back-pressure: soft") {
		t.Fatalf("err = %v", err)
	}
	if len(r.calls) != 0 {
		t.Fatalf("refused batch sent %d statements", len(r.calls))
	}
	for _, e := range events {
		if e.EventID != uuid.Nil {
			t.Fatal("refused batch assigned EventIDs")
		}
	}
	if fmt.Sprint(met.refused) != "map[soft order.viewed:1]" {
		t.Fatalf("refused = %v (only the refused event counts)", met.refused)
	}
	// All critical: written.
	events[1].Priority = PriorityCritical
	if err := w.AppendBatch(context.Background(), r, events); err != nil || len(r.calls) != 1 {
		t.Fatalf("critical batch: %v, %d calls", err, len(r.calls))
	}

	// Hard: every event refused and counted at hard.
	met = &metricsRecorder{}
	w = NewWriter(testTable, WithBackpressure(engagedMonitor(t, true)), WithMetrics(met))
	refusedAt(t, w.AppendBatch(context.Background(), r, []*Event{validEvent(), validEvent()}), BackpressureHard)
	if fmt.Sprint(met.refused) != "map[hard order.confirmed:2]" {
		t.Fatalf("refused = %v", met.refused)
	}
}

func TestUnknownPriorityIsInvalid(t *testing.T) {
	e := validEvent()
	e.Priority = 7
	err := NewWriter(testTable).Validate(e)
	if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "priority 7 is unknown") {
		t.Fatalf("err = %v", err)
	}
	if PriorityCritical.String() != "critical" || PriorityLow.String() != "low" || Priority(7).String() != "Priority(7)" {
		t.Fatal("Priority.String")
	}
	// Without WithBackpressure nothing is refused, whatever the priority.
	e.Priority = PriorityLow
	if err := NewWriter(testTable).Append(context.Background(), &recorder{}, e); err != nil {
		t.Fatal(err)
	}
}
