package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/otlptrace"
	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Trace is the optional publish span of the streaming commands (run,
// recover): one span per event, exported over OTLP/HTTP by
// cmd/outbox-relay/internal/otlptrace, so the binary needs no OpenTelemetry SDK
// (docs/tracing.md).
type Trace struct {
	Publish  bool
	Endpoint string
	// provider is the running exporter (nil: tracing off); runRelay
	// flushes it after the relay stopped.
	provider *otlptrace.Provider
}

// validate checks the tracing flags.
func (t *Trace) validate() []error {
	var errs []error
	if t.Publish && t.Endpoint == "" {
		errs = append(errs, errors.New("--trace-publish needs --otlp-endpoint (where the spans go, e.g. http://127.0.0.1:4318)"))
	}
	if t.Endpoint != "" {
		if _, err := otlptrace.FromEnv(t.Endpoint, "outbox-relay", buildinfo.Version(), nil); err != nil {
			errs = append(errs, fmt.Errorf("--otlp-endpoint: %w", err))
		}
	}
	return errs
}

// options starts the exporter and returns the relay option that uses it;
// none when --trace-publish is off.
func (t *Trace) Options(log *slog.Logger) ([]relay.Option, error) {
	if !t.Publish {
		if t.Endpoint != "" {
			log.Warn("--otlp-endpoint is set but --trace-publish is not: no spans are exported", slog.String("stage", "startup"))
		}
		return nil, nil
	}
	cfg, err := otlptrace.FromEnv(t.Endpoint, "outbox-relay", buildinfo.Version(), log)
	if err != nil {
		return nil, err
	}
	t.provider = otlptrace.New(cfg)
	log.Info("publish spans on", slog.String("stage", "startup"), slog.String("otlp_endpoint", cfg.Endpoint))
	return []relay.Option{relay.WithTracerProvider(t.provider)}, nil
}

// shutdown exports the spans still queued, for at most 5 s.
func (t *Trace) Shutdown(log *slog.Logger) {
	if t.provider == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		log.Warn("exporting the last spans timed out", slog.String("stage", "shutdown"), slog.Any("error", err))
	}
	if n := t.provider.Dropped(); n > 0 {
		log.Warn("spans were dropped (queue full or export failed)", slog.String("stage", "shutdown"), slog.Uint64("spans", n))
	}
}
