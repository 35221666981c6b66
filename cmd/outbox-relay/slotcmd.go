package main

import (
	"context"
	"fmt"
	"io"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/migrate"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/report"
	"github.com/outbox-relay/outbox-relay/slot"
)

// slotCmd is slot status and slot drop (and, with its flag, create).
type slotCmd struct {
	config.LogFlags
	config.DBFlags
	config.StandbyFlags
}

func (*slotCmd) Run(ctx context.Context, x *invocation) error {
	return slotVerb(ctx, x.kctx.Selected().Name, x.cfg, x.stdout)
}

// slotCreateCmd is slot create.
type slotCreateCmd struct {
	slotCmd
	config.CreateFailoverFlags
}

func slotVerb(ctx context.Context, verb string, cfg *config.Config, stdout io.Writer) error {
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, closeStandby, err := cfg.SlotManager(ctx, pool, slot.Config{Name: cfg.Relay.Database.Slot, Publication: cfg.Relay.Database.Publication,
		NoFailover: verb != "create" || cfg.Relay.Database.NoFailoverSlot})
	if err != nil {
		return err
	}
	defer closeStandby()
	switch verb {
	case "create":
		if err := m.EnsurePublication(ctx, cfg.Table().Quoted(), cfg.Table().Schema, cfg.Table().Name); err != nil {
			return err
		}
		st, err := m.Create(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created slot %s at %s%s\n", st.Name, st.ConfirmedFlushLSN, migrate.Note(st))
		return nil
	case "drop":
		if err := m.Drop(ctx); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dropped slot %s\n", cfg.Relay.Database.Slot)
		return nil
	}
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	return report.Write(stdout, report.Slot(st))
}
