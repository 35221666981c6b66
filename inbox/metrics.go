package inbox

import (
	"time"

	"github.com/outbox-relay/outbox-relay/internal/schemareg"
)

// Metrics receives a Consumer's measurements, each with the consumer's
// name. Package inboxprom implements it with Prometheus collectors; nil
// measures nothing. Methods must not block: they run on the consumer's
// goroutines.
type Metrics interface {
	// Applied counts an event whose handler ran and whose transaction
	// committed.
	Applied(consumer string)
	// Duplicate counts a redelivered event skipped because it was already
	// processed or dead-lettered.
	Duplicate(consumer string)
	// Parked counts an event set aside because its aggregate waits on a
	// dead letter.
	Parked(consumer string)
	// DeadLettered counts an event that failed for good and became a dead
	// letter.
	DeadLettered(consumer string)
	// Error counts a failure by reason: handler, permanent, decode (a
	// record that is not an outbox event, or whose framed value cannot be
	// decoded), database, registry (the schema registry did not answer:
	// retried), offset_commit.
	Error(consumer, reason string)
	// OffsetCommit counts a batched offset commit and its duration.
	OffsetCommit(consumer string, d time.Duration)
	// Pruned counts processed_events rows deleted past the retention.
	Pruned(consumer string, rows int64)
	// Processed observes the time from the start of an event's transaction
	// to its outcome, and the record's age (recordTime zero: unknown).
	Processed(consumer string, d time.Duration, recordTime time.Time)
	// Lag reports how many records the partition's high watermark is
	// ahead of the last fetched record.
	Lag(consumer, topic string, partition int, records int64)
}

// BatchMetrics is implemented by a Metrics that also observes batches
// (inboxprom's does). It is a separate interface so that Metrics
// implementations written before batching keep compiling.
type BatchMetrics interface {
	// Batch observes one committed transaction: how many events it took
	// to a final outcome and how long it ran.
	Batch(consumer string, events int, tx time.Duration)
}

// RegistryMetrics is implemented by a Metrics that also observes the
// schema registry client the consumer builds for Config.Schemas.Registry
// (inboxprom's does): the relay's outbox_relay_schema_registry_* for a
// consumer. A separate interface, like BatchMetrics, so that Metrics
// implementations written before the registry formats keep compiling. A
// consumer without a registry never calls it.
type RegistryMetrics interface {
	// RegistryRequest observes one request to the registry by op
	// (schema_by_id, the only lookup a consumer makes: an id's schema,
	// with subject_version for the schemas it references), its outcome
	// (ok, not_found, invalid, transient, unauthorized: the error's
	// reason) and its duration, whatever the outcome.
	RegistryRequest(consumer, op, outcome string, took time.Duration)
	// RegistryCacheLookup counts a lookup of the client's cache by op,
	// answered from it (hit) or passed on to the registry (miss).
	RegistryCacheLookup(consumer, op string, hit bool)
}

// consumerMetrics binds Metrics to one consumer's name.
type consumerMetrics struct {
	name string
	m    Metrics
	bm   BatchMetrics    // nil: not observed
	rm   RegistryMetrics // nil: not observed
}

type nopMetrics struct{}

func (nopMetrics) Applied(string)                             {}
func (nopMetrics) Duplicate(string)                           {}
func (nopMetrics) Parked(string)                              {}
func (nopMetrics) DeadLettered(string)                        {}
func (nopMetrics) Error(string, string)                       {}
func (nopMetrics) OffsetCommit(string, time.Duration)         {}
func (nopMetrics) Pruned(string, int64)                       {}
func (nopMetrics) Processed(string, time.Duration, time.Time) {}
func (nopMetrics) Lag(string, string, int, int64)             {}

func forConsumer(m Metrics, name string) *consumerMetrics {
	if m == nil {
		m = nopMetrics{}
	}
	b, _ := m.(BatchMetrics)
	r, _ := m.(RegistryMetrics)
	return &consumerMetrics{name: name, m: m, bm: b, rm: r}
}

func (c *consumerMetrics) applied()               { c.m.Applied(c.name) }
func (c *consumerMetrics) duplicate()             { c.m.Duplicate(c.name) }
func (c *consumerMetrics) parked()                { c.m.Parked(c.name) }
func (c *consumerMetrics) deadLettered()          { c.m.DeadLettered(c.name) }
func (c *consumerMetrics) errors(reason string)   { c.m.Error(c.name, reason) }
func (c *consumerMetrics) pruned(rows int64)      { c.m.Pruned(c.name, rows) }
func (c *consumerMetrics) commit(d time.Duration) { c.m.OffsetCommit(c.name, d) }
func (c *consumerMetrics) lag(topic string, partition int, records int64) {
	c.m.Lag(c.name, topic, partition, records)
}
func (c *consumerMetrics) batch(events int, d time.Duration) {
	if c.bm != nil {
		c.bm.Batch(c.name, events, d)
	}
}
func (c *consumerMetrics) processed(d time.Duration, recordTime time.Time) {
	c.m.Processed(c.name, d, recordTime)
}

// registry is c as the registry client's schemareg.Metrics, nil when the
// Metrics does not observe the registry (the client then measures
// nothing).
func (c *consumerMetrics) registry() schemareg.Metrics {
	if c.rm == nil {
		return nil
	}
	return registryMetrics{c}
}

// registryMetrics adapts a consumer's RegistryMetrics to the schemareg
// client's interface, adding the consumer's name.
type registryMetrics struct{ c *consumerMetrics }

func (r registryMetrics) Request(op, outcome string, took time.Duration) {
	r.c.rm.RegistryRequest(r.c.name, op, outcome, took)
}

func (r registryMetrics) CacheLookup(op string, hit bool) {
	r.c.rm.RegistryCacheLookup(r.c.name, op, hit)
}

// StaleServed is never called for a consumer: a stale answer is a cached
// latest version past its TTL, and a consumer looks schemas up by id,
// which never goes stale.
func (registryMetrics) StaleServed(string) {}
