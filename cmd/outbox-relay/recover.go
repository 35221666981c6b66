package main

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/backfill"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/recovery"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
)

// recoverCmd is recover: a back-fill, then the relay.
type recoverCmd struct {
	config.LogFlags
	config.DBFlags
	config.StandbyFlags
	config.KafkaFlags
	config.PublishFlags
	config.DeliveryFlags
	config.RunFlags
	Since string `name:"since" help:"back-fill events committed since this time (RFC 3339), instead of since the checkpoint"`
	All   bool   `name:"all" help:"back-fill every row still in the table"`
	NoRun bool   `name:"no-run" help:"exit after the back-fill instead of streaming"`
}

func (c *recoverCmd) Run(ctx context.Context, x *invocation) error {
	cfg, stdout, stderr := x.cfg, x.stdout, x.stderr
	if c.Since != "" && c.All {
		return fmt.Errorf("%w: recover takes at most one of --since and --all", errUsage)
	}
	log := newLogger(cfg, stderr)
	// Set up as `run` is before anything else: the back-fill uses the same
	// Kafka security and scheduler, and streaming follows it.
	r, err := newRelay(cfg, log)
	if err != nil {
		return err
	}
	rc := recovery.Config{
		DatabaseURL: cfg.Relay.Database.URL, ReplicationURL: cfg.Relay.Database.ReplicationURL, BeforeConnect: cfg.Relay.Database.BeforeConnect, Outbox: outboxdb.Outbox{Table: cfg.Table(), Slot: cfg.Relay.Database.Slot, Publication: cfg.Relay.Database.Publication, FailoverSlot: cfg.FailoverSlot()},
		Policy: cfg.Relay.Publish.PoisonPolicy, Publish: cfg.Publish("outbox-relay"),
		CheckpointRetention: cfg.Relay.Checkpoints.Retention, All: c.All,
		Out: stdout, Progress: backfill.PrintProgress(stderr, "recover"), Log: log,
	}
	if c.Since != "" {
		if rc.Since, err = time.Parse(time.RFC3339Nano, c.Since); err != nil {
			return configError{fmt.Errorf("--since %q: use RFC 3339, e.g. 2026-12-02T18:00:00Z", c.Since)}
		}
	}
	if err := recovery.Run(ctx, rc); err != nil || c.NoRun {
		return err
	}
	return runRelay(ctx, cfg, r, log)
}
