// Package relayopt holds the settings behind relay.Option. It is internal
// so that only this module can build options outside the ones package
// relay exports: test hooks such as StatusHold stay out of reach of
// library users and out of the production binary's reach unless it is
// built with the testhooks tag.
package relayopt

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Options are the settings a relay.Option changes.
type Options struct {
	// Logger receives the relay's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the relay's collectors; nil means a private
	// registry (with the Go and process collectors) served by Handler.
	Registerer prometheus.Registerer
	// StatusHold is a test hook: standby status updates confirm only
	// positions acknowledged at least this long ago, while checkpoints
	// are saved as usual. It widens the window in which a checkpoint is
	// ahead of the slot, so a kill -9 test can land in it. 0: off.
	StatusHold time.Duration
	// TracerProvider starts a publish span per event; nil: no spans.
	TracerProvider trace.TracerProvider
	// Propagator reads the producer's context from a row's headers; nil:
	// W3C trace context.
	Propagator propagation.TextMapPropagator
}
