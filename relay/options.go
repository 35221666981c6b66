package relay

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Option changes how New builds a Relay: where its logs, metrics and
// spans go. The With functions of this package build them; relay, outbox
// and inbox all take their logger, metrics and tracing this way, under the
// same names (WithLogger, WithMetrics, WithTracerProvider, WithPropagator),
// so an application wires the three alike.
//
// Option is an interface with an unexported method, so only this package
// makes Options: a new option never breaks a caller, and nothing outside
// the module reaches the relay's internals through one.
type Option interface {
	apply(*options)
}

// options are the settings the Options change; the zero value is the
// default of each.
type options struct {
	// logger receives the relay's logs; nil discards them.
	logger *slog.Logger
	// registerer receives the relay's collectors; nil means a private
	// registry (with the Go and process collectors) served by Handler.
	registerer prometheus.Registerer
	// tracerProvider starts a publish span per event; nil: no spans.
	tracerProvider trace.TracerProvider
	// propagator reads the producer's context from a row's headers; nil:
	// W3C trace context.
	propagator propagation.TextMapPropagator
	// statusHold is a test hook (testhook.go): 0 outside tests.
	statusHold time.Duration
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithLogger sends the relay's logs to l. Every record carries a stage
// attribute (startup, stream, leader, checkpoint, ...) and, for an event,
// event_id, aggregate_id and event_type; payloads are never logged. The
// default discards everything.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) { o.logger = l })
}

// WithMetrics registers the relay's Prometheus collectors (the
// outbox_relay_* series) on r instead of a private registry. Handler then
// serves /metrics from r when r is also a prometheus.Gatherer (a
// *prometheus.Registry is) and not at all otherwise. New fails when r
// already has the collectors, such as another Relay's: wrap r with
// prometheus.WrapRegistererWith and a distinguishing label for a second
// one. The default private registry also holds the Go and process
// collectors; a nil r keeps it.
//
// The name is the outbox's and the inbox's (outbox.WithMetrics,
// inbox.WithMetrics: where the measurements go), but the relay's metrics
// are Prometheus collectors, so it takes a prometheus.Registerer, not a
// Metrics interface with a Prometheus adapter: the relay is a service
// whose metrics are its operating interface (dashboards, alerts, the
// /metrics its Handler serves), while the outbox and the inbox live
// inside an application that may use any metrics system.
func WithMetrics(r prometheus.Registerer) Option {
	return optionFunc(func(o *options) { o.registerer = r })
}
