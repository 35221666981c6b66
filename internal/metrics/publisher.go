package metrics

import "time"

// Publisher adapts the relay's collectors to publisher.Metrics (package
// publisher defines the interface and does not import Prometheus).
type Publisher struct{ r *Relay }

// Publisher returns the publisher's view of m.
func (m *Relay) Publisher() Publisher { return Publisher{m} }

// ProduceRequest counts outbox_relay_publish_attempts_total.
func (p Publisher) ProduceRequest() { p.r.PublishAttempts.Inc() }

// PublishError counts outbox_relay_publish_errors_total{reason,class}.
func (p Publisher) PublishError(reason, class string) {
	p.r.PublishErrors.WithLabelValues(reason, class).Inc()
}

// BatchPublished counts outbox_relay_events_published_total{topic} and
// outbox_relay_batches_published_total.
func (p Publisher) BatchPublished(topic string, events int) {
	p.r.EventsPublished.WithLabelValues(topic).Add(float64(events))
	p.r.BatchesPublished.Inc()
}

// CommitToAck observes outbox_relay_commit_to_ack_seconds.
func (p Publisher) CommitToAck(d time.Duration) { p.r.CommitToAck.Observe(d.Seconds()) }

// PartitionChange counts outbox_relay_topic_partition_changes_total{topic}.
func (p Publisher) PartitionChange(topic string) {
	p.r.TopicPartitionChanges.WithLabelValues(topic).Inc()
}

// MetadataRefreshFailed counts
// outbox_relay_metadata_refresh_failures_total{reason}.
func (p Publisher) MetadataRefreshFailed(reason string) {
	p.r.MetadataRefreshFailures.WithLabelValues(reason).Inc()
}

// TransactionCommitted counts outbox_relay_transactions_total{outcome="committed"}
// and observes the transaction's duration, commit and size.
func (p Publisher) TransactionCommitted(open, commit time.Duration, events int) {
	p.r.Transactions.WithLabelValues("committed").Inc()
	p.r.TransactionDuration.Observe(open.Seconds())
	p.r.TransactionCommit.Observe(commit.Seconds())
	p.r.TransactionEvents.Observe(float64(events))
}

// TransactionAborted counts outbox_relay_transactions_total{outcome="aborted"}.
func (p Publisher) TransactionAborted() { p.r.Transactions.WithLabelValues("aborted").Inc() }

// ProducerFenced counts outbox_relay_producer_fenced_total.
func (p Publisher) ProducerFenced() { p.r.ProducerFenced.Inc() }
