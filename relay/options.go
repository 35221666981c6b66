package relay

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/relayopt"
)

// Option changes how New builds a Relay: what it logs to and where its
// metrics go. Options are built by the With functions of this package.
type Option func(*relayopt.Options)

// WithLogger sends the relay's logs to l. Every record carries a stage
// attribute (startup, stream, leader, checkpoint, ...) and, for an event,
// event_id, aggregate_id and event_type; payloads are never logged. The
// default discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(o *relayopt.Options) { o.Logger = l }
}

// WithRegisterer registers the relay's Prometheus collectors (the
// outbox_relay_* series) on r instead of a private registry. Handler then
// serves /metrics from r when r is also a prometheus.Gatherer (a
// *prometheus.Registry is) and not at all otherwise. New fails when r
// already has the collectors, such as another Relay's: wrap r with
// prometheus.WrapRegistererWith and a distinguishing label for a second
// one. The default private registry also holds the Go and process
// collectors.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *relayopt.Options) { o.Registerer = r }
}
