package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/process"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/httpserve"

	"github.com/outbox-relay/outbox-relay/relay"
)

// runCmd is run: the relay.
type runCmd struct {
	config.LogFlags
	config.DBFlags
	config.StandbyFlags
	config.KafkaFlags
	config.PublishFlags
	config.DeliveryFlags
	config.RunFlags
}

func (*runCmd) Run(ctx context.Context, x *invocation) error {
	log := newLogger(x.cfg, x.stderr)
	r, err := newRelay(x.cfg, log)
	if err != nil {
		return err
	}
	return runRelay(ctx, x.cfg, r, log)
}

// newRelay sets up the process for streaming and returns its relay: the
// one construction path of `run` and of `recover` (which streams after its
// back-fill), so both apply --max-procs and run the cleanup schedule
// alike (configure warned about insecure settings).
func newRelay(cfg *config.Config, log *slog.Logger) (*relay.Relay, error) {
	log.Info("Go scheduler", slog.String("stage", "startup"), slog.Int("gomaxprocs", process.ApplyMaxProcs(cfg.MaxProcs)))
	opts, err := cfg.Trace.Options(log) // tracing.go
	if err != nil {
		return nil, configError{err}
	}
	r, err := relay.New(cfg.Relay, append(opts, relay.WithLogger(log))...)
	if err != nil {
		cfg.Trace.Shutdown(log)
		return nil, configError{err}
	}
	return r, nil
}

// runRelay serves the relay's probes and metrics on --metrics-addr, as the
// relay's handler writes them (no rewriting: compression, content
// negotiation and streaming are Prometheus's), with --pprof the profiles
// on their own loopback --pprof-addr, and runs the relay until SIGTERM.
func runRelay(ctx context.Context, cfg *config.Config, r *relay.Relay, log *slog.Logger) error {
	defer cfg.Trace.Shutdown(log) // after Run: the last spans are exported
	if cfg.MetricsAddr != "" {
		addr, stop, err := httpserve.Serve(cfg.MetricsAddr, r.Handler(), httpserve.Probe)
		if err != nil {
			return fmt.Errorf("metrics: listen on %s: %w (set --metrics-addr to a free address, or empty to disable)", cfg.MetricsAddr, err)
		}
		defer stop()
		log.Info("serving /metrics, /healthz, /readyz", slog.String("stage", "startup"), slog.String("addr", addr.String()))
	}
	if cfg.PProf {
		addr, stop, err := httpserve.Serve(cfg.PProfAddr, httpserve.ProfileHandler(), httpserve.Profiles)
		if err != nil {
			return fmt.Errorf("pprof: listen on %s: %w (set --pprof-addr to a free loopback address)", cfg.PProfAddr, err)
		}
		defer stop()
		log.Info("serving /debug/pprof/", slog.String("stage", "startup"), slog.String("addr", addr.String()))
	}
	return r.Run(ctx)
}
