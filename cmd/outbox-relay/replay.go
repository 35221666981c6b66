package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/backfill"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/configerr"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/replay"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/publisher"
)

const replaySummary = `Re-publishes events still in the outbox table, per aggregate in commit order, each with the
header outbox_replay=replay. Safe beside a running relay: it reads the table in one snapshot and
publishes; it never touches the slot or the checkpoints. Aggregates quarantined in the dead-letter
table are left out (outbox-relay dlq retry handles them).

Positions map to rows through the checkpoint history (conservative: a few events before the start
may be included, none inside the range is missed):
  --from-lsn LSN | --from-checkpoint | --since TIME | --all     where to start (one is required)
  --to-lsn LSN                                                 where to stop (default: now)
  --aggregate A [--aggregate-type T] --event-type E            filters
  --dry-run                                                    count and list, publish nothing`

func replayCommand() command {
	return command{name: "replay", summary: replaySummary, scope: scopeDB | scopeKafka, bind: func(b *envflag.Binder) body {
		var o replay.Config
		b.String(&o.Range.FromLSN, "from-lsn", "", "start at this WAL position (e.g. from checkpoint show)")
		b.String(&o.Range.ToLSN, "to-lsn", "", "stop at this WAL position")
		b.Bool(&o.Range.FromCheckpoint, "from-checkpoint", false, "start at the newest saved checkpoint")
		b.String(&o.Range.Since, "since", "", "start at this time (RFC 3339, e.g. 2026-12-02T18:00:00Z)")
		b.Bool(&o.Range.All, "all", false, "every row still in the table")
		b.String(&o.AggregateID, "aggregate", "", "only this aggregate_id")
		b.String(&o.AggregateType, "aggregate-type", "", "only this aggregate_type")
		b.String(&o.EventType, "event-type", "", "only this event_type")
		b.Bool(&o.DryRun, "dry-run", false, "count and list the matching events, publish nothing")
		b.Int(&o.List, "list", 20, "with --dry-run, how many events to list (0: count only)")
		return func(ctx context.Context, x *invocation) error {
			cfg, stdout, stderr := x.cfg, x.stdout, x.stderr
			if err := o.Range.Validate(); err != nil {
				return configError{err}
			}
			if o.List < 0 {
				return configError{fmt.Errorf("--list %d: use 0 (count only) or more", o.List)}
			}
			o.Table, o.Slot = cfg.table, cfg.Relay.Database.Slot
			pool, err := connectPool(ctx, cfg)
			if err != nil {
				return err
			}
			defer pool.Close()
			err = replay.Run(ctx, o, replay.Deps{
				Pool: pool,
				Identify: func(ctx context.Context) (checkpoint.Identity, error) {
					return outboxdb.Identify(ctx, cfg.Relay.Database.URL, cfg.replOpts()...)
				},
				NewPublisher: func() replay.Publisher { return replayPublisher(cfg, stderr) },
				Out:          stdout,
				Progress:     backfill.PrintProgress(stderr, "replay"),
			})
			var ce *configerr.Error
			if errors.As(err, &ce) {
				return configError{ce.Err}
			}
			return err
		}
	}}
}

// replayPublisher is replay's publisher, on the one Kafka configuration.
// It has no dead letters: quarantined aggregates are left out of a replay.
func replayPublisher(cfg *config, stderr io.Writer) *publisher.Publisher {
	return publisher.New(cfg.publisherConfig("outbox-relay"), publisher.WithLogger(newLogger(cfg, stderr)))
}
