package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/outbox-relay/outbox-relay/slot"
)

func cmdSlot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "status" && args[0] != "create" && args[0] != "drop") {
		fmt.Fprintln(stderr, "Usage: outbox-relay slot status|create|drop [flags]")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return errUsage
	}
	verb := args[0]
	cfg, err := parse("slot "+verb, map[string]string{
		"status": "Shows the slot's confirmed_flush_lsn, restart_lsn, wal_status, safe_wal_size, active pid and lag.",
		"create": "Creates the publication (if missing) and the slot with the pgoutput plugin.",
		"drop":   "Drops the slot. Events not yet confirmed will no longer be delivered by it.",
	}[verb], args[1:], scopeDB, stderr)
	if err != nil {
		return err
	}
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	m := slot.NewManager(pool, cfg.Slot, cfg.Publication)
	switch verb {
	case "create":
		if err := m.EnsurePublication(ctx, cfg.table.Quoted(), cfg.table.Schema, cfg.table.Name); err != nil {
			return err
		}
		st, err := m.Create(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "created slot %s at %s\n", st.Name, st.ConfirmedFlushLSN)
		return nil
	case "drop":
		if err := m.Drop(ctx); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dropped slot %s\n", cfg.Slot)
		return nil
	}
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	out := map[string]any{
		"slot": st.Name, "plugin": st.Plugin, "database": st.Database, "active": st.Active,
		"active_pid": st.ActivePID, "confirmed_flush_lsn": st.ConfirmedFlushLSN.String(),
		"restart_lsn": st.RestartLSN.String(), "wal_status": st.WALStatus, "safe_wal_size": st.SafeWALSize,
		"current_wal_lsn": st.CurrentLSN.String(), "lag_bytes": st.LagBytes, "retained_bytes": st.RetainedBytes,
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
