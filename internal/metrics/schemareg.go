package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SchemaRegistry is the collectors of the schema registry client
// (internal/schemareg) of the registry formats (avro, protobuf,
// json-schema). Their labels are the client's own constants, never a
// subject or an id: op is schema_by_id, subject_version or
// schema_versions, outcome ok, not_found, invalid, transient or
// unauthorized, result hit or miss. Subjects are the producers' to choose
// (a topic, a record name), so one series per subject would grow with
// every event type; a failed lookup's error names its subject instead.
//
// The vectors start without children: a relay of another format has no
// registry client and exports none of these series, and one of a registry
// format gets each series at its first lookup.
type SchemaRegistry struct {
	// Requests counts the requests sent to the registry, by op and
	// outcome (the error class of a failed one).
	Requests *prometheus.CounterVec // op, outcome
	// RequestDuration observes every request, whatever its outcome, up to
	// the client's timeout (10 s by default).
	RequestDuration *prometheus.HistogramVec // op
	// CacheLookups counts the lookups the client's cache answered (hit)
	// or passed on to the registry (miss), by op: a cache too small for
	// the schemas in use shows as a falling hit ratio.
	CacheLookups *prometheus.CounterVec // op, result
	// StaleServed counts lookups answered by a cached latest version past
	// its TTL because its refresh failed transiently: the registry is
	// down and the relay goes on with what it knew.
	StaleServed *prometheus.CounterVec // op
}

// Cache lookup results, the values of
// outbox_relay_schema_registry_cache_lookups_total's result label.
const (
	CacheHit  = "hit"
	CacheMiss = "miss"
)

func newSchemaRegistry() SchemaRegistry {
	return SchemaRegistry{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "schema_registry_requests_total",
			Help: "Requests to the schema registry, by op (schema_by_id, subject_version, schema_versions) and outcome " +
				"(ok, not_found, invalid, transient, unauthorized).",
		}, []string{"op", "outcome"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "schema_registry_request_duration_seconds",
			Help:    "Duration of requests to the schema registry, whatever their outcome, by op.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"op"}),
		CacheLookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "schema_registry_cache_lookups_total",
			Help: "Lookups of the schema registry client's cache, by op and result: hit (answered from the cache) " +
				"or miss (passed on to the registry).",
		}, []string{"op", "result"}),
		StaleServed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "schema_registry_stale_served_total",
			Help: "Lookups answered with a cached latest version past its TTL because the registry failed transiently, by op.",
		}, []string{"op"}),
	}
}

func (s SchemaRegistry) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.Requests, s.RequestDuration, s.CacheLookups, s.StaleServed}
}

// SchemaRegistryClient adapts the relay's collectors to schemareg.Metrics
// (package schemareg defines the interface and does not import
// Prometheus). Its methods are safe for concurrent use, as the client
// requires.
type SchemaRegistryClient struct{ s SchemaRegistry }

// SchemaRegistryClient returns the schema registry client's view of m.
func (m *Relay) SchemaRegistryClient() SchemaRegistryClient {
	return SchemaRegistryClient{m.SchemaRegistry}
}

// Request counts outbox_relay_schema_registry_requests_total{op,outcome}
// and observes outbox_relay_schema_registry_request_duration_seconds{op}.
func (c SchemaRegistryClient) Request(op, outcome string, took time.Duration) {
	c.s.Requests.WithLabelValues(op, outcome).Inc()
	c.s.RequestDuration.WithLabelValues(op).Observe(took.Seconds())
}

// CacheLookup counts
// outbox_relay_schema_registry_cache_lookups_total{op,result}.
func (c SchemaRegistryClient) CacheLookup(op string, hit bool) {
	result := CacheMiss
	if hit {
		result = CacheHit
	}
	c.s.CacheLookups.WithLabelValues(op, result).Inc()
}

// StaleServed counts outbox_relay_schema_registry_stale_served_total{op}.
func (c SchemaRegistryClient) StaleServed(op string) { c.s.StaleServed.WithLabelValues(op).Inc() }
