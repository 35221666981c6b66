package inbox

import (
	"log/slog"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Option changes how New builds a Consumer: where its logs, metrics and
// spans go. The With functions of this package build them; relay, outbox
// and inbox all take their logger, metrics and tracing this way, under the
// same names, so an application wires the three alike. What the consumer
// does (its topics, its batches, its retries) stays in Config.
//
// Option is an interface with an unexported method, so only this package
// makes Options: a new option never breaks a caller.
type Option interface {
	apply(*options)
}

// options are the settings the Options change; the zero value is the
// default of each.
type options struct {
	// logger receives the consumer's logs; nil discards them.
	logger *slog.Logger
	// metrics receives its measurements; nil measures nothing.
	metrics Metrics
	// tracerProvider starts its spans; nil: the global one.
	tracerProvider trace.TracerProvider
	// propagator reads the producer's context; nil: the global one.
	propagator propagation.TextMapPropagator
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithLogger sends the consumer's logs to l, each record with the
// consumer's name (consumer) and a stage attribute (start, apply,
// dead_letter, park, offset_commit, prune, ...), and for an event its
// event_id, aggregate_id and event_type; payloads are never logged. The
// default (or nil) discards everything.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) { o.logger = l })
}

// WithMetrics reports the consumer's measurements to m, each with the
// consumer's name: inboxprom.New gives the Prometheus collectors
// (outbox_relay_inbox_*). A Metrics that is also a BatchMetrics observes
// the batches too. The default (or nil) measures nothing.
func WithMetrics(m Metrics) Option {
	return optionFunc(func(o *options) { o.metrics = m })
}
