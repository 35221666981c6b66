package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/backfill"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/configerr"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/replay"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// replayCmd is replay; its options are replay.Config.
type replayCmd struct {
	config.LogFlags
	config.DBFlags
	config.KafkaFlags
	config.PublishFlags
	FromLSN        string `name:"from-lsn" help:"start at this WAL position (e.g. from checkpoint show)" to:"Options.Range.FromLSN"`
	ToLSN          string `name:"to-lsn" help:"stop at this WAL position" to:"Options.Range.ToLSN"`
	FromCheckpoint bool   `name:"from-checkpoint" help:"start at the newest saved checkpoint" to:"Options.Range.FromCheckpoint"`
	Since          string `name:"since" help:"start at this time (RFC 3339, e.g. 2026-12-02T18:00:00Z)" to:"Options.Range.Since"`
	All            bool   `name:"all" help:"every row still in the table" to:"Options.Range.All"`
	Aggregate      string `name:"aggregate" help:"only this aggregate_id" to:"Options.AggregateID"`
	AggregateType  string `name:"aggregate-type" help:"only this aggregate_type" to:"Options.AggregateType"`
	EventType      string `name:"event-type" help:"only this event_type" to:"Options.EventType"`
	DryRun         bool   `name:"dry-run" help:"count and list the matching events, publish nothing" to:"Options.DryRun"`
	List           int    `name:"list" default:"20" help:"with --dry-run, how many events to list (0: count only)" to:"Options.List"`

	Options replay.Config `kong:"-"`
}

func (c *replayCmd) Run(ctx context.Context, x *invocation) error {
	cfg, stdout, stderr, o := x.cfg, x.stdout, x.stderr, c.Options
	if err := o.Range.Validate(); err != nil {
		return configError{err}
	}
	if o.List < 0 {
		return configError{fmt.Errorf("--list %d: use 0 (count only) or more", o.List)}
	}
	o.Table, o.Slot = cfg.Table(), cfg.Relay.Database.Slot
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	err = replay.Run(ctx, o, replay.Deps{
		Pool: pool,
		Identify: func(ctx context.Context) (checkpoint.Identity, error) {
			return outboxdb.Identify(ctx, cfg.Relay.Database.URL, cfg.ReplOpts()...)
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

// replayPublisher is replay's publisher, on the one Kafka configuration.
// It has no dead letters: quarantined aggregates are left out of a replay.
func replayPublisher(cfg *config.Config, stderr io.Writer) *publisher.Publisher {
	return cfg.Publish("outbox-relay").Publisher(publisher.WithLogger(newLogger(cfg, stderr)))
}
