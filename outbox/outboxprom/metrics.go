// Package outboxprom implements outbox.Metrics with Prometheus collectors
// (outbox_producer_*), so that package outbox itself does not depend on
// Prometheus. Create one per process and share it between Writers and the
// health monitor:
//
//	m := outboxprom.New(prometheus.DefaultRegisterer)
//	hm, err := outbox.NewHealthMonitor(pool, cfg, outbox.WithMetrics(m))
//	w := outbox.NewWriter(table, outbox.WithMetrics(m), outbox.WithBackpressure(hm))
package outboxprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Metrics are the producer side's Prometheus collectors. It implements
// outbox.Metrics.
type Metrics struct {
	conflicts *prometheus.CounterVec
	refused   *prometheus.CounterVec
	engaged   *prometheus.GaugeVec
}

var _ outbox.Metrics = (*Metrics)(nil)

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	const ns, sub = "outbox", "producer"
	m := &Metrics{
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "transition_conflicts_total",
			Help: "Transitions whose conditional change matched no row (a concurrent command won, or the command was invalid in the aggregate's state); no event was written."},
			[]string{"aggregate_type", "event_type"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "backpressure_refused_total",
			Help: "Appends refused with ErrBackpressure, by level (soft: non-critical events, hard: every event) and event type."},
			[]string{"level", "event_type"}),
		engaged: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "backpressure_engaged",
			Help: "1 while back-pressure is engaged at the level (soft, hard), else 0."}, []string{"level"}),
	}
	reg.MustRegister(m.conflicts, m.refused, m.engaged)
	for _, l := range []string{outbox.BackpressureSoft, outbox.BackpressureHard} {
		m.engaged.WithLabelValues(l).Set(0)
	}
	return m
}

// TransitionConflict counts outbox_producer_transition_conflicts_total.
func (m *Metrics) TransitionConflict(aggregateType, eventType string) {
	m.conflicts.WithLabelValues(aggregateType, eventType).Inc()
}

// BackpressureRefused counts outbox_producer_backpressure_refused_total.
func (m *Metrics) BackpressureRefused(level, eventType string) {
	m.refused.WithLabelValues(level, eventType).Inc()
}

// BackpressureEngaged sets outbox_producer_backpressure_engaged.
func (m *Metrics) BackpressureEngaged(level string, engaged bool) {
	v := 0.0
	if engaged {
		v = 1
	}
	m.engaged.WithLabelValues(level).Set(v)
}
