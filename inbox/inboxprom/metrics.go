// Package inboxprom implements inbox.Metrics with Prometheus collectors
// (outbox_relay_inbox_*), so that package inbox itself does not depend on
// Prometheus. Create one per process and share it between Consumers:
//
//	m := inboxprom.New(prometheus.DefaultRegisterer)
//	c, err := inbox.New(inbox.Config{...}, inbox.WithMetrics(m))
package inboxprom

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/inbox"
)

// Metrics are the inbox's Prometheus collectors, labelled by consumer name
// (and topic/partition for lag, reason for errors: all bounded). It
// implements inbox.Metrics.
type Metrics struct {
	applied, duplicates, parked, deadLettered *prometheus.CounterVec
	errs                                      *prometheus.CounterVec
	commits, pruned                           *prometheus.CounterVec
	processing, age, commitSeconds            *prometheus.HistogramVec
	batchEvents, txSeconds                    *prometheus.HistogramVec
	lag                                       *prometheus.GaugeVec
	// the consumer's schema registry client (inbox.RegistryMetrics): the
	// relay's outbox_relay_schema_registry_* with the consumer label
	regRequests, regLookups *prometheus.CounterVec
	regSeconds              *prometheus.HistogramVec
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
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
		errs:         counter("errors_total", "Failures by reason: handler, permanent, decode, database, registry, offset_commit.", "reason"),
		commits:      counter("offset_commits_total", "Successful batched offset commits."),
		pruned:       counter("pruned_total", "processed_events rows deleted past the retention."),
		processing: hist("processing_seconds", "Time from the start of an event's transaction to its outcome, per attempt that succeeded.",
			prometheus.ExponentialBuckets(0.0005, 2, 16)),
		age: hist("event_age_seconds", "Time from the outbox commit (record timestamp) to the event's outcome at this consumer.",
			prometheus.ExponentialBuckets(0.005, 2, 16)),
		commitSeconds: hist("offset_commit_seconds", "Duration of batched offset commits.", prometheus.ExponentialBuckets(0.001, 2, 12)),
		batchEvents: hist("batch_events", "Events per committed transaction (a batch of one partition's records).",
			[]float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000}),
		txSeconds: hist("transaction_seconds", "Duration of the committed transactions that applied a batch, locks to COMMIT.",
			prometheus.ExponentialBuckets(0.0005, 2, 16)),
		regRequests: counter("schema_registry_requests_total", "Requests to the schema registry, by op (schema_by_id, subject_version) and outcome "+
			"(ok, not_found, invalid, transient, unauthorized).", "op", "outcome"),
		regLookups: counter("schema_registry_cache_lookups_total", "Lookups of the schema registry client's cache, by op and result: hit (answered from the cache) "+
			"or miss (passed on to the registry).", "op", "result"),
		regSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "schema_registry_request_duration_seconds",
			Help:    "Duration of requests to the schema registry, whatever their outcome, by op.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"consumer", "op"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "lag_messages",
			Help: "Records behind the partition's high watermark at the last fetched record."}, []string{"consumer", "topic", "partition"}),
	}
	reg.MustRegister(m.applied, m.duplicates, m.parked, m.deadLettered, m.errs, m.commits, m.pruned,
		m.processing, m.age, m.commitSeconds, m.batchEvents, m.txSeconds, m.lag, m.regRequests, m.regLookups, m.regSeconds)
	return m
}

// Applied counts outbox_relay_inbox_events_applied_total.
func (m *Metrics) Applied(consumer string) { m.applied.WithLabelValues(consumer).Inc() }

// Duplicate counts outbox_relay_inbox_duplicates_absorbed_total.
func (m *Metrics) Duplicate(consumer string) { m.duplicates.WithLabelValues(consumer).Inc() }

// Parked counts outbox_relay_inbox_events_parked_total.
func (m *Metrics) Parked(consumer string) { m.parked.WithLabelValues(consumer).Inc() }

// DeadLettered counts outbox_relay_inbox_events_dead_lettered_total.
func (m *Metrics) DeadLettered(consumer string) { m.deadLettered.WithLabelValues(consumer).Inc() }

// Error counts outbox_relay_inbox_errors_total{reason}.
func (m *Metrics) Error(consumer, reason string) { m.errs.WithLabelValues(consumer, reason).Inc() }

// OffsetCommit counts and times a batched offset commit.
func (m *Metrics) OffsetCommit(consumer string, d time.Duration) {
	m.commits.WithLabelValues(consumer).Inc()
	m.commitSeconds.WithLabelValues(consumer).Observe(d.Seconds())
}

// Batch observes outbox_relay_inbox_batch_events and
// outbox_relay_inbox_transaction_seconds (inbox.BatchMetrics).
func (m *Metrics) Batch(consumer string, events int, tx time.Duration) {
	m.batchEvents.WithLabelValues(consumer).Observe(float64(events))
	m.txSeconds.WithLabelValues(consumer).Observe(tx.Seconds())
}

// Pruned counts outbox_relay_inbox_pruned_total.
func (m *Metrics) Pruned(consumer string, rows int64) {
	m.pruned.WithLabelValues(consumer).Add(float64(rows))
}

// Processed observes an event's processing time and, when the record
// carries a timestamp, its age since the outbox commit.
func (m *Metrics) Processed(consumer string, d time.Duration, recordTime time.Time) {
	m.processing.WithLabelValues(consumer).Observe(d.Seconds())
	if !recordTime.IsZero() {
		m.age.WithLabelValues(consumer).Observe(time.Since(recordTime).Seconds())
	}
}

// Lag sets outbox_relay_inbox_lag_messages{topic,partition}.
func (m *Metrics) Lag(consumer, topic string, partition int, records int64) {
	m.lag.WithLabelValues(consumer, topic, strconv.Itoa(partition)).Set(float64(records))
}

// RegistryRequest counts
// outbox_relay_inbox_schema_registry_requests_total{op,outcome} and
// observes outbox_relay_inbox_schema_registry_request_duration_seconds{op}
// (inbox.RegistryMetrics).
func (m *Metrics) RegistryRequest(consumer, op, outcome string, took time.Duration) {
	m.regRequests.WithLabelValues(consumer, op, outcome).Inc()
	m.regSeconds.WithLabelValues(consumer, op).Observe(took.Seconds())
}

// RegistryCacheLookup counts
// outbox_relay_inbox_schema_registry_cache_lookups_total{op,result}, result
// hit or miss (inbox.RegistryMetrics).
func (m *Metrics) RegistryCacheLookup(consumer, op string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.regLookups.WithLabelValues(consumer, op, result).Inc()
}

// Metrics observes batches and the schema registry client too.
var (
	_ inbox.Metrics         = (*Metrics)(nil)
	_ inbox.BatchMetrics    = (*Metrics)(nil)
	_ inbox.RegistryMetrics = (*Metrics)(nil)
)
