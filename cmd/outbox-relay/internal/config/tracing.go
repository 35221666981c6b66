package config

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/tracing"
	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Trace is the optional publish span of the streaming commands (run,
// recover): one span per event, exported over OTLP/HTTP by the
// OpenTelemetry SDK (cmd/outbox-relay/internal/tracing), which reads the
// standard OTEL_* variables; --otlp-endpoint, when set, wins over
// OTEL_EXPORTER_OTLP_ENDPOINT (docs/tracing.md).
type Trace struct {
	Publish  bool
	Endpoint string
	// provider is the running SDK (nil: tracing off); runRelay flushes it
	// after the relay stopped.
	provider *tracing.Provider
}

// settings are the binary's own tracing settings.
func (t *Trace) settings() tracing.Settings {
	return tracing.Settings{Endpoint: t.Endpoint, Service: "outbox-relay", Version: buildinfo.Version()}
}

// validate checks the tracing flags and, when spans are on, the OTEL_*
// variables the SDK would read.
func (t *Trace) validate() []error {
	s := t.settings()
	switch {
	case t.Publish && !s.HasEndpoint():
		return []error{errors.New("--trace-publish needs --otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT (where the spans go, e.g. http://127.0.0.1:4318)")}
	case t.Publish:
		return s.Check()
	case t.Endpoint != "": // a bad flag is an error even while it is unused
		if err := s.CheckEndpoint(); err != nil {
			return []error{err}
		}
	}
	return nil
}

// Options starts the SDK and returns the relay option that uses it; none
// when --trace-publish is off.
func (t *Trace) Options(log *slog.Logger) ([]relay.Option, error) {
	if !t.Publish {
		if t.Endpoint != "" {
			log.Warn("--otlp-endpoint is set but --trace-publish is not: no spans are exported", slog.String("stage", "startup"))
		}
		return nil, nil
	}
	s := t.settings()
	p, err := tracing.Start(context.Background(), s, log)
	if err != nil {
		return nil, err
	}
	t.provider = p
	url, from := s.URL()
	log.Info("publish spans on", slog.String("stage", "startup"), slog.String("otlp_endpoint", url), slog.String("otlp_endpoint_from", from))
	return []relay.Option{relay.WithTracerProvider(p)}, nil
}

// Shutdown exports the spans still queued, for at most 5 s.
func (t *Trace) Shutdown(log *slog.Logger) {
	if t.provider == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		log.Warn("exporting the last spans failed or timed out", slog.String("stage", "shutdown"), slog.Any("error", err))
	}
	if n := t.provider.Dropped(); n > 0 {
		log.Warn("spans were dropped (queue full or export failed)", slog.String("stage", "shutdown"), slog.Uint64("spans", n))
	}
	t.provider = nil
}
