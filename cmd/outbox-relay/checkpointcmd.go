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

// checkpointSummaries describe each checkpoint command in its --help.
var checkpointSummaries = map[string]string{
	"show": "Prints the newest saved checkpoint of the slot as JSON, compared with the slot and the server:\n" +
		"whether it is usable (same system identifier, and the same timeline or, after a promotion, an earlier one\n" +
		"this server's timeline descends from, up to where it ended) and how far ahead of the slot it is.",
	"reset": "Deletes the slot's checkpoints, after a deliberate restore or re-initialisation of the database\n" +
		"(a checkpoint of another system identifier, or of a timeline this server's does not descend from, is refused by\n" +
		"run and recover; replay and cleanup want one of the server's own timeline).",
}

// checkpointCmd is checkpoint show and checkpoint reset.
type checkpointCmd struct {
	config.LogFlags
	config.DBFlags
	config.StandbyFlags
}

func (*checkpointCmd) about(name string) about {
	a := about{summary: checkpointSummaries[verbOf(name)], scope: config.ScopeDB}
	if verbOf(name) == "reset" {
		// reset only deletes the checkpoint rows, on the primary.
		a.unused = []string{"publication", "replication-url"}
	}
	return a
}
func (*checkpointCmd) Run(ctx context.Context, x *invocation) error {
	return checkpointVerb(ctx, verbOf(x.name), x.cfg, x.stdout)
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
