package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/slot"
)

const checkpointUsage = `Usage: outbox-relay checkpoint show|reset [flags]

  checkpoint show     the newest saved position of the slot (JSON), compared with the slot and the server
  checkpoint reset    delete the slot's checkpoints (after a deliberate restore or re-initialisation)

Run "outbox-relay checkpoint show|reset --help" for the flags.
`

// checkpointSummaries describe each checkpoint command in its --help.
var checkpointSummaries = map[string]string{
	"show": "Prints the newest saved checkpoint of the slot as JSON, compared with the slot and the server:\n" +
		"whether it is usable (same system identifier and timeline) and how far ahead of the slot it is.",
	"reset": "Deletes the slot's checkpoints, after a deliberate restore or re-initialisation of the database\n" +
		"(a checkpoint of another system identifier or timeline is refused by recover, replay and cleanup).",
}

func cmdCheckpoint(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, err := groupVerb(args, checkpointUsage, stderr, "show", "reset")
	if err != nil {
		return err
	}
	cfg, err := parse("checkpoint "+verb, checkpointSummaries[verb], args[1:], scopeDB, stderr)
	if err != nil {
		return err
	}
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := checkpoint.NewStore(pool, cfg.table, cfg.Slot)
	if err := store.Check(ctx); err != nil {
		return err
	}
	if verb == "reset" {
		n, err := store.Reset(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %d checkpoint rows of slot %s (%s)\n", n, cfg.Slot, cfg.table)
		return nil
	}
	cp, err := store.Latest(ctx)
	if err != nil {
		return err
	}
	id, err := outboxdb.Identify(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	out := checkpointJSON(cp)
	out["server_system_identifier"] = id.SystemID
	out["server_timeline"] = id.Timeline
	if verr := cp.Verify(id); verr != nil {
		out["usable"] = false
		out["refused"] = verr.Error()
	} else {
		out["usable"] = true
	}
	st, err := slot.NewManager(pool, cfg.Slot, cfg.Publication).Status(ctx)
	switch {
	case errors.Is(err, slot.ErrNotFound):
		out["slot_exists"] = false
	case err != nil:
		return err
	default:
		out["slot_exists"] = true
		out["slot_confirmed_flush_lsn"] = st.ConfirmedFlushLSN.String()
		out["slot_wal_status"] = st.WALStatus
		out["ahead_of_slot_bytes"] = int64(cp.LSN) - int64(st.ConfirmedFlushLSN)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func checkpointJSON(cp checkpoint.Checkpoint) map[string]any {
	m := map[string]any{
		"outbox_table": cp.OutboxTable, "slot": cp.Slot, "lsn": cp.LSN.String(),
		"system_identifier": cp.Identity.SystemID, "timeline": cp.Identity.Timeline,
		"started_at": cp.StartedAt, "saved_at": cp.SavedAt, "age_seconds": time.Since(cp.SavedAt).Seconds(),
	}
	if !cp.CommitTime.IsZero() {
		m["commit_time"] = cp.CommitTime
	}
	if cp.Xid != 0 {
		m["xid"] = cp.Xid
	}
	if f := cp.Fence; f != nil {
		m["fence"] = map[string]any{"lsn": f.LSN.String(), "xmin": f.Xmin, "xmax": f.Xmax, "at": f.At}
	}
	if p := cp.Partial; !p.Empty() {
		m["partial"] = map[string]any{"commit_lsn": p.CommitLSN.String(), "events": p.Events, "acked_past": p.Known() - p.Events}
	}
	return m
}
