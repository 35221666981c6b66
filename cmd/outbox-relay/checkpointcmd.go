package main

import (
	"context"
	"fmt"
	"io"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/report"
	"github.com/outbox-relay/outbox-relay/slot"
)

// checkpointCmd is checkpoint show and checkpoint reset.
type checkpointCmd struct {
	config.LogFlags
	config.DBFlags
	config.StandbyFlags
}

func (*checkpointCmd) Run(ctx context.Context, x *invocation) error {
	return checkpointVerb(ctx, x.kctx.Selected().Name, x.cfg, x.stdout)
}

func checkpointVerb(ctx context.Context, verb string, cfg *config.Config, stdout io.Writer) error {
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := checkpoint.NewStore(pool, cfg.Table(), cfg.Relay.Database.Slot)
	if err := store.Check(ctx); err != nil {
		return err
	}
	if verb == "reset" {
		n, err := store.Reset(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %d checkpoint rows of slot %s (%s)\n", n, cfg.Relay.Database.Slot, cfg.Table())
		return nil
	}
	cp, err := store.Latest(ctx)
	if err != nil {
		return err
	}
	m, closeStandby, err := cfg.SlotManager(ctx, pool, slot.Config{Name: cfg.Relay.Database.Slot, Publication: cfg.Relay.Database.Publication})
	if err != nil {
		return err
	}
	defer closeStandby()
	out, err := report.Checkpoint(ctx, cp, m, cfg.Relay.Database.URL, cfg.ReplOpts())
	if err != nil {
		return err
	}
	return report.Write(stdout, out)
}
