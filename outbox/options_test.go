package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestHealthMonitorOptions: without options a HealthMonitor logs and
// measures nothing; WithLogger and WithMetrics give it where to, and an
// engaged budget reaches both.
func TestHealthMonitorOptions(t *testing.T) {
	cfg := HealthConfig{Slot: "orders", Soft: Budget{MaxRetainedWAL: mib}}
	m, err := NewHealthMonitor(&fakeSlot{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m.log.Handler() != slog.DiscardHandler || m.metrics != (nopMetrics{}) {
		t.Fatalf("defaults: logger %T, metrics %T; want none", m.log.Handler(), m.metrics)
	}

	db := &fakeSlot{}
	db.set("reserved", nil, 200*mib, 2000, 1000)
	met, logs := &metricsRecorder{}, &logRecorder{}
	if m, err = NewHealthMonitor(db, cfg, WithLogger(slog.New(logs)), WithMetrics(met)); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := met.take(); fmt.Sprint(got) != "[soft=true]" {
		t.Errorf("WithMetrics: %v, want the soft level engaged", got)
	}
	if got := logs.take(); len(got) != 1 || !strings.HasPrefix(got[0], "WARN back-pressure engaged") {
		t.Errorf("WithLogger: %q, want the engage line", got)
	}
}

// TestOptionsOfTheOtherConstructor: an option of the Writer changes
// nothing in a HealthMonitor, and WithLogger nothing in a Writer.
func TestOptionsOfTheOtherConstructor(t *testing.T) {
	m, err := NewHealthMonitor(&fakeSlot{}, HealthConfig{Slot: "orders"},
		WithBinaryPayload(), WithBackpressure(engagedMonitor(t, true)), WithPropagator(w3c))
	if err != nil || m.log.Handler() != slog.DiscardHandler || m.metrics != (nopMetrics{}) {
		t.Fatalf("monitor with Writer options: %v, %+v", err, m)
	}
	plain, logged := NewWriter(testTable), NewWriter(testTable, WithLogger(slog.New(&logRecorder{})))
	if *plain != *logged {
		t.Fatalf("WithLogger changed a Writer: %+v, want %+v", logged, plain)
	}
}

// TestWithMetricsNil: a nil Metrics changes nothing, an earlier one stays.
func TestWithMetricsNil(t *testing.T) {
	met := &metricsRecorder{}
	if w := NewWriter(testTable, WithMetrics(met), WithMetrics(nil)); w.metrics != met {
		t.Fatalf("metrics %T, want the first one", w.metrics)
	}
	if w := NewWriter(testTable, WithMetrics(nil)); w.metrics != (nopMetrics{}) {
		t.Fatalf("metrics %T, want none", w.metrics)
	}
}
