package publisher

import "log/slog"

// Option changes how New builds a Publisher: where its logs and metrics
// go, under the same names relay, outbox and inbox use. What the publisher
// does (brokers, batches, retries, transactions) stays in Config.
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
