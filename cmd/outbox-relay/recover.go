package main

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/backfill"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/recovery"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
)

const recoverSummary = `Recovers from a missing or invalidated (wal_status = lost) slot without losing events:
creates a new slot with an exported snapshot, back-fills from the outbox table every event committed
since the last checkpoint that the new slot will not deliver (header outbox_replay=recover), then
streams like "run". The boundary is exact at the new slot (its snapshot sees exactly what committed
before its consistent point) and conservative at the checkpoint (a few events before it are re-sent).
The slot is held active during the back-fill, so a relay started meanwhile refuses it.
Without a usable checkpoint pass --since TIME or --all.`

func recoverCommand() command {
	return command{name: "recover", summary: recoverSummary, scope: scopeDB | scopeKafka | scopeRun, bind: func(b *envflag.Binder) body {
		var since string
		var all, noRun bool
		b.String(&since, "since", "", "back-fill events committed since this time (RFC 3339), instead of since the checkpoint")
		b.Bool(&all, "all", false, "back-fill every row still in the table")
		b.Bool(&noRun, "no-run", false, "exit after the back-fill instead of streaming")
		return func(ctx context.Context, x *invocation) error {
			cfg, stdout, stderr := x.cfg, x.stdout, x.stderr
			if since != "" && all {
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
				DatabaseURL: cfg.Relay.Database.URL, BeforeConnect: cfg.Relay.Database.BeforeConnect, Outbox: outboxdb.Outbox{Table: cfg.table, Slot: cfg.Relay.Database.Slot, Publication: cfg.Relay.Database.Publication, FailoverSlot: cfg.failoverSlot()},
				Policy: cfg.Relay.Publish.PoisonPolicy, Publisher: cfg.publisherConfig("outbox-relay"),
				CheckpointRetention: cfg.Relay.Checkpoints.Retention, All: all,
				Out: stdout, Progress: backfill.PrintProgress(stderr, "recover"), Log: log,
			}
			if since != "" {
				if rc.Since, err = time.Parse(time.RFC3339Nano, since); err != nil {
					return configError{fmt.Errorf("--since %q: use RFC 3339, e.g. 2026-12-02T18:00:00Z", since)}
				}
			}
			if err := recovery.Run(ctx, rc); err != nil || noRun {
				return err
			}
			return runRelay(ctx, cfg, r, log)
		}
	}}
}
