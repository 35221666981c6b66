package checkpoint

import "log/slog"

// Option changes how NewSaver builds a Saver: where its logs go, under
// the name relay, outbox, inbox and publisher use. What it saves, and
// when, stays in SaverConfig.
//
// Option is an interface with an unexported method, so only this package
// makes Options: a new option never breaks a caller.
type Option interface {
	apply(*options)
}

type options struct {
	// logger receives the saver's logs; nil discards them.
	logger *slog.Logger
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithLogger sends the saver's logs (stage checkpoint: a save that failed
// or timed out, the final save at shutdown) to l. The default (or nil)
// discards them.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) { o.logger = l })
}
