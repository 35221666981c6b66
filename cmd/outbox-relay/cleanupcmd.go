package main

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/cleanup"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
)

// cleanupCmd is cleanup; its options are cleanup.Options (Validate names
// them Options.OlderThan: the error prints --older-than).
type cleanupCmd struct {
	config.LogFlags
	config.DBFlags
	OlderThan   time.Duration `name:"older-than" help:"delete only rows created longer ago than this (required), e.g. 7d or 168h" to:"Options.OlderThan"`
	BatchSize   int           `name:"batch-size" default:"${cleanup_batch_size}" help:"rows per DELETE transaction (1..${cleanup_max_batch_size})" to:"Options.BatchSize"`
	Pause       time.Duration `name:"pause" default:"${cleanup_pause}" help:"pause between batches (0: none, batches back to back)" to:"Options.Pause"`
	MaxDuration time.Duration `name:"max-duration" help:"stop after this long (0: until done); the next run continues" to:"Options.MaxDuration"`
	DryRun      bool          `name:"dry-run" help:"count what would be deleted, delete nothing" to:"Options.DryRun"`

	Options cleanup.Options `kong:"-"`
}

func (c *cleanupCmd) Run(ctx context.Context, x *invocation) error {
	cfg, o := x.cfg, c.Options
	if err := o.Validate(); err != nil {
		return configError{err}
	}
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	id, err := outboxdb.Identify(ctx, cfg.Relay.Database.URL, cfg.ReplOpts()...)
	if err != nil {
		return err
	}
	cl := &cleanup.Cleaner{DB: pool, Table: cfg.Table(), Slot: cfg.Relay.Database.Slot, Identity: id, Options: o, Log: newLogger(cfg, x.stderr)}
	res, err := cl.Run(ctx)
	if err != nil {
		return err
	}
	res.Write(x.stdout, cfg.Table().String(), o.DryRun)
	return nil
}
