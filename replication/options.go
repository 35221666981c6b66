package replication

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgconn"
)

// Option changes how NewStream builds a Stream (WithLogger) or how Connect
// and ConnectParams connect (WithBeforeConnect); each ignores the options
// that are not its. Options rather than more parameters keep the
// signatures stable as they grow, under the names relay, inbox and outbox
// use.
//
// Option is an interface with an unexported method, so only this package
// makes Options: a new option never breaks a caller.
type Option interface {
	apply(*options)
}

type options struct {
	logger        *slog.Logger
	beforeConnect func(context.Context, *pgconn.Config) error
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// newOptions applies opts over the defaults: a logger that discards.
func newOptions(opts []Option) options {
	o := options{logger: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	return o
}

// WithLogger sends the stream's logs to l (nil: none). The stream logs
// positions, relations and stages, never payloads.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) {
		if l != nil {
			o.logger = l
		}
	})
}

// WithBeforeConnect calls f with the parsed connection configuration just
// before each connection is opened, so that credentials that rotate or
// expire (a password file, a cloud IAM token) are fetched at every
// connect instead of being fixed in the URL. f may set Password or any
// other field (Fallbacks share Password); an error aborts the connect.
// The configuration is the connect's own copy. This is the same hook as
// relay.DatabaseConfig.BeforeConnect, which the relay passes here. A nil
// f sets no hook.
func WithBeforeConnect(f func(ctx context.Context, cfg *pgconn.Config) error) Option {
	return optionFunc(func(o *options) { o.beforeConnect = f })
}
