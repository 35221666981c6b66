package main

import (
	"context"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/cleanup"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
)

const cleanupSummary = `Deletes outbox rows the relay has confirmed: created before now() - --older-than, committed
before the newest checkpoint's fence (so Kafka acknowledged them), without an open dead-letter row
and not of a quarantined aggregate. Small batches (--batch-size rows, each its own transaction) with
--pause between them, so there is no long lock and no WAL burst; safe beside a running relay.
A partitioned outbox (range on created_at) has its old partitions detached and dropped instead.
Refused without a checkpoint, or with one of another system identifier or timeline.
Checkpoints older than the cutoff are pruned (a replay from them would miss deleted rows).`

func cleanupCommand() command {
	return command{name: "cleanup", summary: cleanupSummary, scope: scopeDB, bind: func(b *envflag.Binder) body {
		var o cleanup.Options
		b.Fields(&o, "Options.") // Validate names Options.OlderThan: run prints --older-than
		b.Duration(&o.OlderThan, "older-than", 0, "delete only rows created longer ago than this (required), e.g. 7d or 168h")
		b.Int(&o.BatchSize, "batch-size", cleanup.DefaultBatchSize, fmt.Sprintf("rows per DELETE transaction (1..%d)", cleanup.MaxBatchSize))
		b.Duration(&o.Pause, "pause", cleanup.DefaultPause, "pause between batches (0: none, batches back to back)")
		b.Duration(&o.MaxDuration, "max-duration", 0, "stop after this long (0: until done); the next run continues")
		b.Bool(&o.DryRun, "dry-run", false, "count what would be deleted, delete nothing")
		return func(ctx context.Context, x *invocation) error {
			cfg, stdout, stderr := x.cfg, x.stdout, x.stderr
			if err := o.Validate(); err != nil {
				return configError{err}
			}
			pool, err := connectPool(ctx, cfg)
			if err != nil {
				return err
			}
			defer pool.Close()
			id, err := outboxdb.Identify(ctx, cfg.Relay.Database.URL, cfg.replOpts()...)
			if err != nil {
				return err
			}
			c := &cleanup.Cleaner{DB: pool, Table: cfg.table, Slot: cfg.Relay.Database.Slot, Identity: id, Options: o, Log: newLogger(cfg, stderr)}
			res, err := c.Run(ctx)
			if err != nil {
				return err
			}
			res.Write(stdout, cfg.table.String(), o.DryRun)
			return nil
		}
	}}
}
