package publisher

import (
	"log/slog"

	"github.com/segmentio/kafka-go"
)

// Option changes how New builds a Publisher: where its logs and metrics
// go, under the same names relay, outbox and inbox use, and its wiring
// (transport, dead letters, transactions, reserved topics). What the
// publisher does (topics, batches, retries, records) stays in Config.
//
// Option is an interface with an unexported method, so only this package
// makes Options: a new option never breaks a caller.
type Option interface {
	apply(*options)
}

// options are the settings the Options change; the zero value is the
// default of each.
type options struct {
	// logger receives the publisher's logs; nil discards them.
	logger *slog.Logger
	// metrics receives its measurements; nil measures nothing.
	metrics Metrics
	wiring
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithLogger sends the publisher's logs to l, each record with a stage
// attribute (publish, transaction, ...) and for an event its event_id,
// aggregate_id and event_type; payloads are never logged. The default (or
// nil) discards everything.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) { o.logger = l })
}

// WithMetrics reports the publisher's measurements to m. The default (or
// nil) measures nothing.
func WithMetrics(m Metrics) Option {
	return optionFunc(func(o *options) { o.metrics = m })
}

// options' wiring: set by the relay and its tools, each the same way
// (see New).
type wiring struct {
	transport    *kafka.Transport
	deadLetters  DeadLetters
	transactions *TransactionConfig
	reserved     []string
	failed       func(Failure)
	schemas      Schemas
}

// WithTransport sends every request to the brokers through t, so its TLS,
// SASL, ClientID, DialTimeout and MetadataTTL apply to all of them
// (kafka-go does not refresh metadata on NotLeaderForPartition, so
// MetadataTTL bounds the stall after a leader change). The default:
// PLAINTEXT, client ID "outbox-relay", a 5 s dial timeout and a 1 s
// MetadataTTL.
func WithTransport(t *kafka.Transport) Option {
	return optionFunc(func(o *options) { o.transport = t })
}

// WithDeadLetters hands poison events to d, which dead-letters them and
// quarantines their aggregates, whose later events it parks. Without it
// the first poison event fails the publisher (Fatal).
func WithDeadLetters(d DeadLetters) Option {
	return optionFunc(func(o *options) { o.deadLetters = d })
}

// WithTransactions writes exactly-once: in Kafka transactions, each with a
// position record (see TransactionConfig). It implies the idempotent
// producer.
func WithTransactions(tc TransactionConfig) Option {
	return optionFunc(func(o *options) { o.transactions = &tc })
}

// WithReservedTopics names topics no event may be routed to, besides
// every name that begins with "__" (Kafka's internal topics and, by
// default, the relay's positions topic). The relay names its positions
// topic here in every delivery mode: an outbox row routed there by a
// template such as "{aggregate_type}" would be a forged position, which
// makes a relay skip events at its next start. Such an event is
// dead-lettered (reason reserved_topic).
func WithReservedTopics(topics ...string) Option {
	return optionFunc(func(o *options) { o.reserved = append(o.reserved, topics...) })
}

// WithFailureHook tells f of every failed write and topic lookup (the
// relay's stall report names the last as the cause). It is called on the
// failure path only, never per event, from the publisher's goroutines:
// keep it fast.
func WithFailureHook(f func(Failure)) Option {
	return optionFunc(func(o *options) { o.failed = f })
}
