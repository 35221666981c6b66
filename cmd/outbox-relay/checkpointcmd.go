package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/replication"
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
		"whether it is usable (same system identifier, and the same timeline or, after a promotion, an earlier one\n" +
		"this server's timeline descends from, up to where it ended) and how far ahead of the slot it is.",
	"reset": "Deletes the slot's checkpoints, after a deliberate restore or re-initialisation of the database\n" +
		"(a checkpoint of another system identifier, or of a timeline this server's does not descend from, is refused by\n" +
		"run and recover; replay and cleanup want one of the server's own timeline).",
}

func cmdCheckpoint(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	verb, err := groupVerb(args, checkpointUsage, stderr, checkpointSummaries)
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
	store := checkpoint.NewStore(pool, cfg.table, cfg.Relay.Database.Slot)
	if err := store.Check(ctx); err != nil {
		return err
	}
	if verb == "reset" {
		n, err := store.Reset(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %d checkpoint rows of slot %s (%s)\n", n, cfg.Relay.Database.Slot, cfg.table)
		return nil
	}
	cp, err := store.Latest(ctx)
	if err != nil {
		return err
	}
	out := checkpointJSON(cp)
	if err := checkpointUsable(ctx, cfg.Relay.Database.URL, cfg.replOpts(), cp, out); err != nil {
		return err
	}
	st, err := slot.NewManager(pool, cfg.Relay.Database.Slot, cfg.Relay.Database.Publication).Status(ctx)
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

// checkpointUsable identifies the server on a replication connection and
// reports in out whether cp applies there, as the relay decides it
// (checkpoint.Store.Resume): saved on the server's system and timeline, or
// on an earlier timeline of the same system (a promoted standby) at or
// before where that timeline ended.
func checkpointUsable(ctx context.Context, url string, opts []replication.ConnectOption, cp checkpoint.Checkpoint, out map[string]any) error {
	conn, err := replication.Connect(ctx, url, opts...)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	id, _, err := checkpoint.Identify(ctx, conn)
	if err != nil {
		return err
	}
	out["server_system_identifier"] = id.SystemID
	out["server_timeline"] = id.Timeline
	lin, err := cp.Trace(ctx, conn, id)
	var mismatch *checkpoint.MismatchError
	switch {
	case errors.As(err, &mismatch):
		out["usable"] = false
		out["refused"] = err.Error()
		return nil
	case err != nil:
		return err
	}
	out["usable"] = lin.Shares(cp.LSN)
	if !lin.Ancestor {
		return nil
	}
	out["timeline_switch_lsn"] = lin.End.String()
	if lin.Shares(cp.LSN) {
		out["lineage"] = fmt.Sprintf("promoted standby of the same cluster: saved on timeline %d, which this server's timeline %d descends from, "+
			"before that timeline ended at %s: it applies", lin.Timeline, id.Timeline, lin.End)
		return nil
	}
	out["lineage"] = fmt.Sprintf("promoted standby of the same cluster, but saved past the point where timeline %d ended (%s): "+
		"the relay resumes from the slot's position without skipping (duplicates, never loss); events committed past %s "+
		"may have been published from the old primary although this timeline lacks them", lin.Timeline, lin.End, lin.End)
	return nil
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
