package inbox

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the inbox's Prometheus collectors, labelled by consumer name
// (and topic/partition for lag, reason for errors: all bounded). Create one
// per process with NewMetrics and share it between Consumers.
type Metrics struct {
	applied, duplicates, parked, deadLettered *prometheus.CounterVec
	errs                                      *prometheus.CounterVec
	commits, pruned                           *prometheus.CounterVec
	processing, age, commitSeconds            *prometheus.HistogramVec
	lag                                       *prometheus.GaugeVec
}

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "outbox_relay", "inbox"
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help},
			append([]string{"consumer"}, labels...))
	}
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help, Buckets: buckets},
			[]string{"consumer"})
	}
	m := &Metrics{
		applied:      counter("events_applied_total", "Events whose handler ran and whose transaction committed."),
		duplicates:   counter("duplicates_absorbed_total", "Redelivered events skipped because they were already processed or dead-lettered."),
		parked:       counter("events_parked_total", "Events written to the dead-letter table because their aggregate waits on a dead-lettered event."),
		deadLettered: counter("events_dead_lettered_total", "Events that failed permanently and were written to the dead-letter table."),
		errs:         counter("errors_total", "Failures by reason: handler, permanent, decode, database, offset_commit.", "reason"),
		commits:      counter("offset_commits_total", "Successful batched offset commits."),
		pruned:       counter("pruned_total", "processed_events rows deleted past the retention."),
		processing: hist("processing_seconds", "Time from the start of an event's transaction to its outcome, per attempt that succeeded.",
			prometheus.ExponentialBuckets(0.0005, 2, 16)),
		age: hist("event_age_seconds", "Time from the outbox commit (record timestamp) to the event's outcome at this consumer.",
			prometheus.ExponentialBuckets(0.005, 2, 16)),
		commitSeconds: hist("offset_commit_seconds", "Duration of batched offset commits.", prometheus.ExponentialBuckets(0.001, 2, 12)),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "lag_messages",
			Help: "Records behind the partition's high watermark at the last fetched record."}, []string{"consumer", "topic", "partition"}),
	}
	reg.MustRegister(m.applied, m.duplicates, m.parked, m.deadLettered, m.errs, m.commits, m.pruned,
		m.processing, m.age, m.commitSeconds, m.lag)
	return m
}

// consumerMetrics are Metrics bound to one consumer; a nil *Metrics gives
// collectors that are not registered anywhere.
type consumerMetrics struct {
	name                                      string
	applied, duplicates, parked, deadLettered prometheus.Counter
	commits, pruned                           prometheus.Counter
	processing, age, commitSeconds            prometheus.Observer
	errsVec                                   *prometheus.CounterVec
	lagVec                                    *prometheus.GaugeVec
}

func (m *Metrics) forConsumer(name string) *consumerMetrics {
	if m == nil {
		m = NewMetrics(prometheus.NewRegistry())
	}
	return &consumerMetrics{
		name:    name,
		applied: m.applied.WithLabelValues(name), duplicates: m.duplicates.WithLabelValues(name),
		parked: m.parked.WithLabelValues(name), deadLettered: m.deadLettered.WithLabelValues(name),
		commits: m.commits.WithLabelValues(name), pruned: m.pruned.WithLabelValues(name),
		processing: m.processing.WithLabelValues(name), age: m.age.WithLabelValues(name),
		commitSeconds: m.commitSeconds.WithLabelValues(name),
		errsVec:       m.errs, lagVec: m.lag,
	}
}

func (m *consumerMetrics) errors(reason string) { m.errsVec.WithLabelValues(m.name, reason).Inc() }

func (m *consumerMetrics) lag(topic string, partition int, v float64) {
	m.lagVec.WithLabelValues(m.name, topic, strconv.Itoa(partition)).Set(v)
}

func (m *consumerMetrics) processed(d time.Duration, recordTime time.Time) {
	m.processing.Observe(d.Seconds())
	if !recordTime.IsZero() {
		m.age.Observe(time.Since(recordTime).Seconds())
	}
}
