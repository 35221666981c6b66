package outbox

import (
	"log/slog"

	"go.opentelemetry.io/otel/propagation"

	"github.com/outbox-relay/outbox-relay/fielderr"
)

// FieldError is one invalid Config field: its Go path (Field), the
// rejected value (Value, nil when beside the point) and what to do (Err).
// HealthConfig.Validate joins one per problem. It is relay's and inbox's
// FieldError too: one type, so one errors.As handles every package's
// configuration errors.
type FieldError = fielderr.Error

// ErrRequired is the Err of a FieldError for a required field left empty.
var ErrRequired = fielderr.ErrRequired

// Option changes how NewWriter builds a Writer or NewHealthMonitor a
// HealthMonitor. The With functions of this package build them, and each
// says whom it configures: WithBinaryPayload, WithSchema,
// WithBackpressure, WithEventCheck and WithPropagator a Writer, WithLogger a
// HealthMonitor, WithMetrics both (one Metrics for the monitor and its
// Writers). The constructor an option does not configure ignores it.
//
// One Option type for the two, rather than one each, because they share
// WithMetrics and are wired together (WithBackpressure hands the monitor
// to the Writer). relay, outbox and inbox take their logger, metrics and
// tracing under the same names (WithLogger, WithMetrics, WithPropagator),
// so an application wires the three alike; the outbox starts no spans, so
// it has no WithTracerProvider.
//
// Option is an interface with an unexported method, so only this package
// makes Options: a new option never breaks a caller.
type Option interface {
	apply(*options)
}

// options are the settings the Options change; the zero value is the
// default of each.
type options struct {
	// payload is how a Writer stores payloads: JSON by default.
	payload payloadKind
	// noHeaders: the table has no headers column (WithSchema).
	noHeaders bool
	// propagator writes a Writer's trace headers; nil: the global one.
	propagator propagation.TextMapPropagator
	// backpressure is a Writer's monitor; nil: nothing is refused.
	backpressure *HealthMonitor
	// check checks a Writer's events before their INSERT
	// (WithEventCheck); nil: not checked.
	check EventChecker
	// metrics receives a Writer's and a HealthMonitor's measurements;
	// nil measures nothing.
	metrics Metrics
	// logger receives a HealthMonitor's logs; nil discards them.
	logger *slog.Logger
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithLogger sends a HealthMonitor's logs to l: one line when a level
// engages or releases, when the reading goes stale or is fresh again, and
// a warning (at most once a minute) about failing refreshes, each with
// stage=backpressure and the slot. The default (or nil) discards them. A
// HealthMonitor option: a Writer logs nothing (it returns its errors).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) { o.logger = l })
}
